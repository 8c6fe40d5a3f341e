"""FLIS's LeNet for MNIST trained with PyTorch on one CPU thread: the reference beside
burn_cnn and candle_cnn (same model, batch order, optimizer and report line; see
docs/results/cnn-engine.md). Settings from the environment: EPOCHS, SEED, DROPOUT, MAX_BATCHES,
FLINT_DATA_DIR."""
import gzip
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
torch.set_num_interop_threads(1)

BATCH, LR = 32, 0.01
EPOCHS = int(os.environ.get("EPOCHS", 2))
SEED = int(os.environ.get("SEED", 1))
DROPOUT = float(os.environ.get("DROPOUT", 0.0))
MAX_BATCHES = int(os.environ.get("MAX_BATCHES", 0))
DATA = os.path.join(os.environ.get("FLINT_DATA_DIR", "../shared/data"), "mnist")
M64 = (1 << 64) - 1


class SplitMix:
    """The generator of common.rs, for the same batch order."""

    def __init__(self, state):
        self.s = state & M64

    def next_u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def epoch_order(seed, epoch, n):
    rng = SplitMix(seed ^ ((0x5851F42D4C957F2D * (epoch + 1)) & M64))
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.next_u64() % (i + 1)
        order[i], order[j] = order[j], order[i]
    return torch.tensor(order)


def load(prefix):
    with gzip.open(f"{DATA}/{prefix}-images-idx3-ubyte.gz") as f:
        raw = f.read()
    n = struct.unpack(">I", raw[4:8])[0]
    x = torch.frombuffer(bytearray(raw[16:]), dtype=torch.uint8).reshape(n, 1, 28, 28)
    with gzip.open(f"{DATA}/{prefix}-labels-idx1-ubyte.gz") as f:
        y = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8).long()
    return x.float() / 255.0, y


class LeNet(nn.Module):
    """FLIS's LeNet (models/model.py) with a ReLU after fc1 as in the standard LeNet, and an
    optional dropout before fc2 (0 in the timed runs)."""

    def __init__(self, dropout):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 500)
        self.fc2 = nn.Linear(500, 10)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(self.dropout(x))


def main():
    torch.manual_seed(SEED)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    model = LeNet(DROPOUT)
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__} cpu  LeNet params {params} ({params * 4 / 1e6:.4f} MB = "
          f"{params * 4 / 2**20:.4f} MiB f32)  batch {BATCH} lr {LR} seed {SEED} dropout {DROPOUT}  "
          f"threads {torch.get_num_threads()}")
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.0)
    for epoch in range(1, EPOCHS + 1):
        order = epoch_order(SEED, epoch, len(ytr))
        model.train()
        start = time.perf_counter()
        total, seen, last = 0.0, 0, 0.0
        for bi, lo in enumerate(range(0, len(order), BATCH)):
            if MAX_BATCHES and bi == MAX_BATCHES:
                break
            idx = order[lo:lo + BATCH]
            opt.zero_grad()
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            last = loss.item()
            total += last
            seen += len(idx)
        secs = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            hits = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                       for i in range(0, len(yte), 1000))
        bits = struct.unpack("<I", struct.pack("<f", last))[0]
        batches = -(-seen // BATCH)
        print(f"epoch {epoch} train {secs:.2f} s  {seen / secs:.1f} samples/s  test accuracy "
              f"{hits / len(yte) * 100:.2f} %  mean loss {total / batches:.6f}  last loss {last:.9f} "
              f"bits {bits:#010x}", flush=True)


if __name__ == "__main__":
    main()
