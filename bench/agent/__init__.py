"""The node agent, measured end to end: its CPU mode here, its NVIDIA mode on a GPU node
(docs/agent.md quotes both)."""
