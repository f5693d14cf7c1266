"""Runnable examples: the tour (demo.py), its paced twin (video_demo.py), handlers for `nobroker work`.

A package so that ``nobroker work examples.handlers:slow`` finds the handlers
from the root of a clone. Imports: nothing.
"""
