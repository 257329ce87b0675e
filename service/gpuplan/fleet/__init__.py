"""The live-fleet store in Redis: the agent writes it, the API reads it.

Nothing here imports litestar; the API and the agent are both clients of this package.
"""
