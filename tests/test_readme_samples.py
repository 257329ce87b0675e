"""README.md's curl samples print what the service prints (tests/readme_samples.py
re-records them)."""

from tests.readme_samples import (
    README,
    client,
    masked,
    printed_lines,
    rerecorded,
    run,
    samples,
)


def test_every_readme_sample_prints_what_the_service_answers() -> None:
    text = README.read_text(encoding="utf-8")
    found = samples(text)
    assert len(found) >= 10
    stale = []
    with client() as app:
        for sample in found:
            live = masked(printed_lines(run(app, sample.command)))
            if masked(sample.output) != live:
                stale.append(
                    f"README.md sample `{sample.command}` shows\n    {sample.output}\n"
                    f"  but the service prints\n    {live}"
                )
    assert not stale, "\n".join(stale) + "\n(re-record with `python -m tests.readme_samples`)"


def test_the_catalog_counts_are_sampled() -> None:
    commands = [s.command for s in samples(README.read_text(encoding="utf-8"))]
    assert any(c.startswith("curl -s http://127.0.0.1:8000/v1/gpus |") for c in commands)
    assert any("/v1/gpus?" in c for c in commands)


def test_a_drifted_sample_is_caught_and_rerecorded() -> None:
    text = README.read_text(encoding="utf-8").replace('# {"count":39,', '# {"count":10,')
    (sample,) = [s for s in samples(text) if s.output == ['{"count":10,']]
    with client() as app:
        assert printed_lines(run(app, sample.command)) != sample.output
    assert rerecorded(text) == README.read_text(encoding="utf-8")
