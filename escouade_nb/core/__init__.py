"""Pure and synchronous pieces: the conversation fold, the status machine, prompt blocks,
plans, per-harness adapters, plain-text renders, observers. No asyncio, no subprocess,
no widget: data in, state and change events out."""
