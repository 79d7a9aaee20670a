"""Compiler passes: streams, sync events, memory. Each pass is small and in its own file."""
