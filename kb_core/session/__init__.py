"""The session layer: the typed operations (the one API), the service that opens a home and makes
sessions, import jobs and a public demo's visitors.
"""
