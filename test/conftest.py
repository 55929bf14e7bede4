"""Shared by every test under test/.

Being here puts test/ on sys.path (pytest's default import mode), so tests anywhere below import the helper that
builds and loads the C++ test doubles: `import native_doubles` (test/native_doubles.py).
"""
