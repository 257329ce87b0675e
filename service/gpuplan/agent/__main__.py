"""``python -m gpuplan.agent``: the same as ``gpuplan agent``."""

from gpuplan.cli_agent import agent

if __name__ == "__main__":
    agent(prog_name="python -m gpuplan.agent")
