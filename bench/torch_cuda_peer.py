"""PyTorch on one GPU beside psgraph's GPU benches (bench/cuda_train.sh,
bench/cuda_inception3.sh): training images/sec of one model on random input,
cuDNN benchmark mode, TF32 off; mixed: autocast to bf16, mixed-f16: to f16
with a GradScaler.
    python3 bench/torch_cuda_peer.py mlp|cnn|inception3 BATCH STEPS f32|mixed|mixed-f16
mlp and cnn: psgraph's models on 28x28x1, SGD lr 0.01 momentum 0.9, 20 warmup
steps; inception3: torchvision's Inception-v3 (no aux head) on 299x299x3, 1000
classes, plain SGD lr 0.01 (bench/inception3.sh's recipe), 5 warmup steps."""
import sys
import time

import torch
import torch.nn as nn


def model_of(name):
    """The net, its input's (channels, size), classes, SGD momentum, warmup steps."""
    if name == "mlp":
        net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10))
        return net, (1, 28), 10, 0.9, 20
    if name == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                            nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
        return net, (1, 28), 10, 0.9, 20
    if name == "inception3":
        import torchvision
        net = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True)
        return net, (3, 299), 1000, 0.0, 5
    sys.exit(f"unknown model {name!r}: mlp, cnn or inception3")


def main():
    name, batch, steps, precision = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    half = {"mixed": torch.bfloat16, "mixed-f16": torch.float16}.get(precision)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    net, (channels, size), classes, momentum, warmup = model_of(name)
    net = net.to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=momentum)
    scaler = torch.cuda.amp.GradScaler(enabled=half == torch.float16)
    x = torch.rand(batch, channels, size, size, device=dev)
    y = torch.randint(0, classes, (batch,), device=dev)
    for i in range(steps + warmup):
        if i == warmup:
            torch.cuda.synchronize()
            t0 = time.time()
        opt.zero_grad()
        with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
            loss = nn.functional.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        loss.item()
    torch.cuda.synchronize()
    print(steps * batch / (time.time() - t0))


if __name__ == "__main__":
    main()
