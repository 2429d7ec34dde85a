"""What every layer may use: errors, configuration, argument checks, safe reading of user files and ZIPs,
redaction, JSON, rate limits, the message catalogues, and the file primitives the store is built on (atomic
writes, locks, removal, file names, versioned files).
"""
