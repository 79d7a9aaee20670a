"""Synchronisation passes on a plan: the minimal Send/Recv events (events.py) and their
physical ids (event_ids.py), which meet a pyge.maxEventNum cap by adding order where one is
set (event_cap.py); both read event lifetimes in the host order (lifetimes.py)."""
