"""Synchronisation passes on a plan: the minimal Send/Recv events (events.py) and their
physical ids (event_ids.py)."""
