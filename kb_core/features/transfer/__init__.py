"""Export and import-db files: a KB Workbench export archive read under limits, written and restored."""
