"""Answers as text: every renderer of the command line, pure functions of a response
Struct, so an answer computed locally and one fetched from the API print the same bytes.
"""
