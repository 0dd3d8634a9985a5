"""What the host asks of a plugin beside running programs.

`host_callbacks.py`: send and recv (the host's callbacks around an
execution). `serialization.py`: an executable as bytes and back.
"""
