# run.py's language-model loader for ONNX Runtime GenAI: the bundle's model-builder folder with
# the recorded thread count, and its generator loop, greedy and exactly the asked tokens.


def load_generator(settings, folder):  # type: ignore[no-untyped-def]
    """A function of (prompt_ids, output_tokens) yielding each step's tokens, one per row."""
    import json

    import numpy as np
    import onnxruntime_genai as og

    config = og.Config(str(folder / settings["model_dir"]))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": int(settings["threads"]), "inter_op_num_threads": 1}}}}))
    model = og.Model(config)

    def request(prompt_ids, output_tokens):  # type: ignore[no-untyped-def]
        ids = np.ascontiguousarray(prompt_ids, dtype=np.int32)
        params = og.GeneratorParams(model)
        total = ids.shape[1] + output_tokens
        params.set_search_options(max_length=total, min_length=total, do_sample=False,
                                  batch_size=ids.shape[0])
        generator = og.Generator(model, params)
        generator.append_tokens(ids)
        for _ in range(output_tokens):
            generator.generate_next_token()
            yield np.asarray(generator.get_next_tokens())

    return request
