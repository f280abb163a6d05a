"""The index on disk: the native index directory (manifest, doc store, postings and impacts) and
the one face every kind of index (native, sharded, Lucene) shows the stages above it."""
