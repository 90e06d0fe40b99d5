# run.py's language-model loader for OpenVINO: the bundle's stateful IR (its KV cache is the
# infer request's state) compiled with the recorded properties, and the greedy loop dse timed:
# the prompts in one inference, then one inference per step, each asking for its last position's
# logits only.


def load_generator(settings, folder):  # type: ignore[no-untyped-def]
    """A function of (prompt_ids, output_tokens) yielding each step's tokens, one per row."""
    import numpy as np
    import openvino

    core = openvino.Core()
    model = core.read_model(str(folder / settings["model_dir"] / "openvino_model.xml"))
    compiled = core.compile_model(model, "CPU", dict(settings["properties"]))
    infer = compiled.create_infer_request()

    def step(ids: np.ndarray, mask: np.ndarray, positions: np.ndarray,
             keep: np.ndarray) -> np.ndarray:
        infer.infer({"input_ids": ids, "attention_mask": mask, "position_ids": positions,
                     "logits_to_keep": keep})
        logits = infer.get_tensor("logits").data
        return np.asarray(logits[:, -1].argmax(axis=-1))

    def request(prompt_ids, output_tokens):  # type: ignore[no-untyped-def]
        ids = np.ascontiguousarray(prompt_ids, dtype=np.int64)
        rows, length = ids.shape
        mask = np.ones((rows, length + output_tokens), dtype=np.int64)
        infer.reset_state()
        token = step(ids, mask[:, :length],
                     np.ascontiguousarray(np.broadcast_to(np.arange(length), (rows, length))),
                     np.array([length - 1], dtype=np.int64))
        yield token
        for index in range(output_tokens - 1):
            token = step(token[:, None].astype(np.int64), mask[:, :length + index + 1],
                         np.full((rows, 1), length + index, dtype=np.int64),
                         np.zeros(1, dtype=np.int64))
            yield token

    return request
