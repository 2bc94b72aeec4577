"""Front ends that produce programs: the ONNX importer, int8 post-training quantization and
the program builders (the idioms that imported and hand-written programs share)."""
