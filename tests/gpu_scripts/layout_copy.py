"""GPU check of kernels.layout.to_channels_last (the NCHW → channels_last copy nhwc_igemm's callers use): on
random shapes, tile sizes and input offsets (so that 16-byte alignment varies), the copy equals torch's bit for
bit, with torch's strides, in float32, bfloat16 and float16 (each dtype its own binary, one after another on the same
shape); and the copy that rounds to nearest TF32 (nhwc_preround's) equals the host rounding of
torch's copy bit for bit. Prints the counts and 'ok'; any difference raises."""

import random

import torch

from convtune.kernels.layout import to_channels_last
from convtune.kernels.precision import round_to_tf32_even

random.seed(12)
CASES = 300
tiles = [(64, 64, 4), (32, 128, 4), (128, 32, 8), (16, 16, 1)]
bad, bad_rounded = [], []
for i in range(CASES):
    n, c = random.randint(1, 9), random.choice([1, 2, 3, 5, 15, 16, 17, 48, 64, 96, 100, 256, 384, 513])
    h, w = random.randint(1, 70), random.randint(1, 70)
    offset = random.choice([0, 0, 1, 2, 3])  # elements: a view that starts off the allocation's alignment
    flat = torch.randn(offset + n * c * h * w, device="cuda")
    x = flat[offset:].view(n, c, h, w)
    tile = tiles[i % len(tiles)] if i % 5 else (64, 64, 4)
    for xd in (x, x.bfloat16(), x.half()):  # the 16-bit copies compared by their bits
        y = to_channels_last(xd, *tile)
        want = xd.contiguous(memory_format=torch.channels_last)
        if not (torch.equal(y.view(torch.int16) if xd.element_size() == 2 else y, want.view(torch.int16)
                            if xd.element_size() == 2 else want) and y.stride() == want.stride()):
            bad.append(f"n={n} c={c} h={h} w={w} offset={offset} tile={tile} {xd.dtype}")
    r = to_channels_last(x, *tile, round_to_nearest_tf32=True)
    want_r = round_to_tf32_even(x.contiguous(memory_format=torch.channels_last)).contiguous(
        memory_format=torch.channels_last)
    if not (torch.equal(r.view(torch.int32), want_r.view(torch.int32)) and r.stride() == want_r.stride()):
        bad_rounded.append(f"n={n} c={c} h={h} w={w} offset={offset} tile={tile}")
big = torch.randn(256, 96, 55, 55, device="cuda")  # an L1 #50-sized output: the 2**31 guard is not near
assert torch.equal(to_channels_last(big), big.contiguous(memory_format=torch.channels_last))
for b in bad:
    print("DIFFERS", b)
for b in bad_rounded:
    print("ROUNDED COPY DIFFERS", b)
print(f"{CASES - len(bad)} of {CASES} random copies equal torch's; {CASES - len(bad_rounded)} of {CASES} rounding "
      "copies equal its host rounding")
assert not bad and not bad_rounded
print("ok")
