"""Reference outputs of OpenCV's adaptiveThreshold (ADAPTIVE_THRESH_GAUSSIAN_C, THRESH_BINARY,
block 11, C = 2) on four 28x28 test images built by formula, printed as Rust u64 arrays for
common/src/data/booleanize.rs (bit y*28+x of an image's words = pixel (x, y) is set).

    python3 -m venv /tmp/cv && /tmp/cv/bin/pip install opencv-python-headless
    /tmp/cv/bin/python tests/oracles/opencv_adaptive_reference.py
"""
import cv2
import numpy as np


def images():
    y, x = np.mgrid[0:28, 0:28]
    yield "pattern", (x * 37 + y * 101 + (x * y) % 13 * 19) % 256
    yield "gradient", (x + y) * 255 // 54
    yield "checker", np.where(((x // 4) + (y // 4)) % 2 == 0, 200, 40) + (x * 7 + y * 3) % 11
    yield "blob", np.clip(255 - ((x - 13) ** 2 + (y - 15) ** 2) * 3, 0, 255)


print(f"// OpenCV {cv2.__version__}")
for name, img in images():
    out = cv2.adaptiveThreshold(img.astype(np.uint8), 1, cv2.ADAPTIVE_THRESH_GAUSSIAN_C, cv2.THRESH_BINARY, 11, 2)
    bits = out.ravel()
    words = [sum(int(bits[w * 64 + b]) << b for b in range(64) if w * 64 + b < bits.size) for w in range(13)]
    print(f"const {name.upper()}: [u64; 13] = [{', '.join(f'0x{v:016x}' for v in words)}];")

# The first three Fashion-MNIST test images (needs FLINT_DATA_DIR), for tests/real_data.rs.
import gzip
import os

d = os.environ.get("FLINT_DATA_DIR")
if d:
    with gzip.open(os.path.join(d, "fashion-mnist", "t10k-images-idx3-ubyte.gz"), "rb") as f:
        raw = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 28, 28)
    for i in range(3):
        out = cv2.adaptiveThreshold(raw[i], 1, cv2.ADAPTIVE_THRESH_GAUSSIAN_C, cv2.THRESH_BINARY, 11, 2)
        bits = out.ravel()
        words = [sum(int(bits[w * 64 + b]) << b for b in range(64) if w * 64 + b < bits.size) for w in range(13)]
        print(f"const FMNIST_TEST_{i}: [u64; 13] = [{', '.join(f'0x{v:016x}' for v in words)}];")
