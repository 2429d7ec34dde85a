"""What a session orchestrates, above the store: import, search and its narrative, bundles, transfer,
evaluation, the demo KB, and the typed results they return.
"""
