# run.py's language-model loader for eager torch: the bundle's Hugging Face folder loaded by
# transformers at the recorded compute precision, its linear layers' weights quantized as
# recorded (torchao, weight-only), decoded greedily over transformers' own KV cache with the
# head computed at the last position only, as the trial ran it.


def load_generator(settings, folder):  # type: ignore[no-untyped-def]
    """A function of (prompt_ids, output_tokens) yielding each step's tokens, one per row."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    torch.set_num_threads(int(settings["threads"]))
    dtype = getattr(torch, settings["dtype"])
    device = settings["device"]
    model = AutoModelForCausalLM.from_pretrained(str(folder / settings["model_dir"]), dtype=dtype)
    model = model.to(device).eval()
    weights = settings["knobs"].get("weights", "same")
    if weights != "same":
        from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        quantize_(model, Int8WeightOnlyConfig() if weights == "int8" else IntxWeightOnlyConfig(
            weight_dtype=torch.int4,  # type: ignore[attr-defined]
            granularity=PerGroup(int(settings["weight_group_size"]))))

    def request(prompt_ids, output_tokens):  # type: ignore[no-untyped-def]
        ids = torch.as_tensor(prompt_ids, dtype=torch.int64, device=device)
        with torch.inference_mode():
            cache = DynamicCache(config=model.config)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            for step in range(output_tokens):
                token = out.logits[:, -1, :].argmax(-1, keepdim=True)
                yield token.reshape(-1).cpu().numpy()
                if step + 1 < output_tokens:
                    out = model(input_ids=token, past_key_values=cache, use_cache=True,
                                logits_to_keep=1)

    return request
