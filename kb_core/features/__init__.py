"""What a session orchestrates, above the store: import, search and its narrative, bundles, transfer, kept
evaluation runs, and the typed requests and results they share.
"""
