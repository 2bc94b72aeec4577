"""The language: the construct table, terms, the Lark parser, type rules and the numpy
reference interpreter. Every later stage reads programs through this package."""
