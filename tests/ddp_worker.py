"""One data-parallel training run as a script, for tests/test_distributed.py: `python ddp_worker.py OUT [PRECISION]`
trains a tiny model for 2 steps on fixed sentence pairs, as one process or under torchrun; rank 0 saves the starting
weights to OUT.start and the final ones to OUT, and every rank writes its gradient scaler's state to
OUT.scaler-RANK.json (files: ranks' prints may interleave)."""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_model

from transformer.distributed import World, init_world, leave_world
from transformer.model import Transformer, TransformerConfig
from transformer.trainer import TrainConfig, Trainer
from transformer.training import TokenBatchSampler

world = World.from_env()
init_world(world, torch.device("cpu"))
g = torch.Generator().manual_seed(0)
lengths = torch.randint(2, 12, (40,), generator=g).tolist() + [60]  # the long one fills a micro-batch alone
pairs = [(torch.randint(3, 30, (n,), generator=g).tolist(), torch.randint(3, 30, (n + 1,), generator=g).tolist())
         for n in lengths]
torch.manual_seed(0)
model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30, dropout=0.0))
epoch = TokenBatchSampler([(len(x) + 1, len(y) + 1) for x, y in pairs], 64, seed=0).batches(0)
# each step spans a whole epoch of micro-batches, among them the long sentence alone: one rank's share is empty
if world.is_main:
    save_model(model, f"{sys.argv[1]}.start")
precision = sys.argv[2] if len(sys.argv) > 2 else "fp32"
config = TrainConfig(max_tokens=64, accumulate=len(epoch), max_steps=2, warmup=1, eval_every=100, precision=precision)
trainer = Trainer(model, config, pairs, progress=False, world=world)
# Adam's first steps are about lr·sign(gradient): they would blow up rounding noise in gradients that are zero in
# exact arithmetic (the key biases') to ±lr. A large ε makes each step proportional to the gradient instead.
trainer.optimizer.param_groups[0]["eps"] = 1e-2
trainer.fit()
Path(f"{sys.argv[1]}.scaler-{world.rank}.json").write_text(json.dumps(trainer.scaler.state_dict(), sort_keys=True))
if world.is_main:
    save_model(model, sys.argv[1])
    print("smallest micro-batch:", min(map(len, epoch)), "sentence(s)")
leave_world(world)
