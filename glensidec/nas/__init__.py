"""Neural architecture search as program transformation (docs/nas.md): layer graphs of
programs, transformations of them, and a search scored by the compiler's cycle model."""
