"""Capture this node's NVML answers as a recording the tests can replay.

``python -m gpuplan.agent.telemetry.record [--sweeps N] > node.json`` runs the
agent's own collector against the real driver through
:class:`~gpuplan.agent.telemetry.recording.RecordingNvml`, so the recording holds
exactly the calls the collector makes, errors included. Review it before
committing: it holds UUIDs and PCI bus ids of the machine.
"""

import argparse
import json
import socket
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=1, help="telemetry sweeps to record")
    args = parser.parse_args()
    import pynvml

    from gpuplan.agent.telemetry.base import TelemetryError
    from gpuplan.agent.telemetry.nvml import NvmlSource
    from gpuplan.agent.telemetry.recording import RecordingNvml

    recorder = RecordingNvml(pynvml)
    try:
        source = NvmlSource(recorder)
    except TelemetryError as exc:
        sys.exit(f"cannot record: {exc}")
    for _ in range(args.sweeps):
        source.collect(socket.gethostname())
    source.close()
    comment = f"captured by gpuplan.agent.telemetry.record on {socket.gethostname()}"
    json.dump(recorder.recording(comment), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
