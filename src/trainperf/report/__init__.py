"""What people look at and load after a run: the HTML report, TensorBoard scalars, the Hugging Face
export and text samples. Reads run directories; imports only the parts below it (train, mlperf, model,
data, config)."""
