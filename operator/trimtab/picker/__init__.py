"""The endpoint picker: an ext_proc server speaking the Gateway API Inference Extension protocol."""
