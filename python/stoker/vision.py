"""stoker.vision: torchvision.transforms' names and arguments, run by stoker's C++ pipeline.

    from stoker import vision as T
    transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    train = stoker.ImageFolder("data/train", transform=transform)

A Compose given to one of stoker's datasets (ImageFolder, ImageList, the shard readers) runs in
the workers in C++, without the GIL: decoding, the geometry (crop, resize, flip) fused into one
resampling pass, colour jitter, and the conversion to the output tensor. The pixels are
torchvision's (Pillow's resampling) in the default "exact" mode. Random transforms draw from
the sample's generator, seeded from (seed, epoch, index), so augmentation is the same for any
num_workers. A Compose can also be called on encoded bytes, a PIL image or a uint8 HWC array.

What differs from torchvision: the output is always a tensor (uint8 CHW without ToTensor, as
PILToTensor gives); ToTensor / PILToTensor come last, followed only by Normalize.
"""

import enum
import numbers

from . import _stoker

_v = _stoker.vision


class InterpolationMode(enum.Enum):
    """torchvision.transforms.InterpolationMode's values stoker implements (Pillow's)."""
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


_INTERPOLATION = {"nearest": _v.Interpolation.NEAREST, "bilinear": _v.Interpolation.BILINEAR,
                  "bicubic": _v.Interpolation.BICUBIC}


def _interpolation(mode):
    value = getattr(mode, "value", mode)  # this enum or torchvision's
    if isinstance(value, str) and value.lower() in _INTERPOLATION:
        return _INTERPOLATION[value.lower()]
    raise ValueError("stoker.vision: interpolation {!r} is not available; use NEAREST, "
                     "BILINEAR or BICUBIC".format(mode))


def _size(size, name):
    if isinstance(size, numbers.Number):
        return int(size)
    size = tuple(int(s) for s in size)
    if len(size) not in (1, 2):
        raise ValueError("{}: size should be an int or a sequence of one or two ints, got "
                         "{}".format(name, size))
    return size[0] if len(size) == 1 else size


class _Transform:
    """A transform stoker's pipeline runs; calling one runs it alone (Compose([self]))."""

    _spec = None

    def __call__(self, image):
        return Compose([self])(image)

    def __repr__(self):
        return "{}()".format(self.__class__.__name__)


class Resize(_Transform):
    """torchvision.transforms.Resize: an int resizes the shorter side (the longer one
    int(size * longer / shorter), capped by max_size); (h, w) resizes to exactly that.
    `antialias` is accepted for torchvision's signature: Pillow's resampling always
    antialiases."""

    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias=None):
        size = _size(size, "Resize")
        if max_size is not None and not isinstance(size, int):
            raise ValueError("max_size should only be passed if size specifies the length of "
                             "the smaller edge, i.e. size should be an int or a sequence of "
                             "length 1 in torchscript mode.")
        self.size, self.interpolation, self.max_size = size, interpolation, max_size
        self._spec = _v.Resize(size, _interpolation(interpolation), max_size or 0)


class CenterCrop(_Transform):
    """torchvision.transforms.CenterCrop (zero padding where the image is smaller)."""

    def __init__(self, size):
        self.size = _size(size, "CenterCrop")
        self._spec = _v.CenterCrop(self.size)


class RandomResizedCrop(_Transform):
    """torchvision.transforms.RandomResizedCrop."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=None):
        self.size = _size(size, "RandomResizedCrop")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError("Scale and ratio should be of kind (min, max)")
        self.scale, self.ratio, self.interpolation = tuple(scale), tuple(ratio), interpolation
        self._spec = _v.RandomResizedCrop(self.size, self.scale, self.ratio,
                                          _interpolation(interpolation))


class RandomCrop(_Transform):
    """torchvision.transforms.RandomCrop (padding, pad_if_needed, fill, padding_mode)."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0,
                 padding_mode="constant"):
        self.size = _size(size, "RandomCrop")
        if padding is None:
            pad = (0, 0, 0, 0)
        elif isinstance(padding, numbers.Number):
            pad = (int(padding),) * 4
        elif len(padding) == 2:
            pad = (int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1]))
        elif len(padding) == 4:
            pad = tuple(int(p) for p in padding)
        else:
            raise ValueError("Padding must be an int or a 1, 2, or 4 element tuple, not a "
                             "{} element tuple".format(len(padding)))
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError("Padding mode should be either constant, edge, reflect or "
                             "symmetric")
        colour = (int(fill),) * 3 if isinstance(fill, numbers.Number) else tuple(
            int(f) for f in fill)
        self.padding, self.pad_if_needed, self.fill = padding, pad_if_needed, fill
        self.padding_mode = padding_mode
        self._spec = _v.RandomCrop(self.size, pad, bool(pad_if_needed), colour, padding_mode)


class RandomHorizontalFlip(_Transform):
    """torchvision.transforms.RandomHorizontalFlip."""

    def __init__(self, p=0.5):
        self.p = p
        self._spec = _v.RandomHorizontalFlip(float(p))


def _jitter_range(value, name, center=1.0, bound=(0, float("inf")), clip_first_on_zero=True):
    # torchvision's ColorJitter._check_input: a number v gives [center - v, center + v].
    if isinstance(value, numbers.Number):
        if value < 0:
            raise ValueError("If {} is a single number, it must be non negative.".format(name))
        value = [center - float(value), center + float(value)]
        if clip_first_on_zero:
            value[0] = max(value[0], 0.0)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        if not bound[0] <= value[0] <= value[1] <= bound[1]:
            raise ValueError("{} values should be between {}".format(name, bound))
    else:
        raise TypeError("{} should be a single number or a list/tuple with length 2.".format(
            name))
    if value[0] == value[1] == center:
        return None
    return (float(value[0]), float(value[1]))


class ColorJitter(_Transform):
    """torchvision.transforms.ColorJitter (brightness, contrast, saturation, hue)."""

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        self.brightness = _jitter_range(brightness, "brightness")
        self.contrast = _jitter_range(contrast, "contrast")
        self.saturation = _jitter_range(saturation, "saturation")
        self.hue = _jitter_range(hue, "hue", center=0, bound=(-0.5, 0.5),
                                 clip_first_on_zero=False)
        self._spec = _v.ColorJitter(self.brightness, self.contrast, self.saturation, self.hue)


class Normalize(_Transform):
    """torchvision.transforms.Normalize on the float tensor ToTensor gives (3 channels)."""

    def __init__(self, mean, std, inplace=False):
        mean, std = [float(m) for m in mean], [float(s) for s in std]
        if len(mean) == 1:
            mean = mean * 3
        if len(std) == 1:
            std = std * 3
        if len(mean) != 3 or len(std) != 3:
            raise ValueError("stoker.vision.Normalize: mean and std have 3 values (RGB)")
        if any(s == 0 for s in std):
            raise ValueError("std evaluated to zero after conversion to torch.float32, leading "
                             "to division by zero.")
        self.mean, self.std, self.inplace = mean, std, inplace
        self._spec = _v.Normalize(mean, std)


class ToTensor:
    """torchvision.transforms.ToTensor: float32 CHW, pixel / 255."""

    def __call__(self, image):
        return Compose([self])(image)

    def __repr__(self):
        return "ToTensor()"


class PILToTensor:
    """torchvision.transforms.PILToTensor: uint8 CHW."""

    def __call__(self, image):
        return Compose([self])(image)

    def __repr__(self):
        return "PILToTensor()"


class Compose:
    """torchvision.transforms.Compose of stoker.vision transforms, as one C++ pipeline.

    mode="fast" lets JPEG decoding use its DCT scaling where the output keeps its resolution
    (faster, not torchvision's exact pixels); output_dtype="float16" or "bfloat16" changes
    ToTensor's dtype."""

    def __init__(self, transforms, mode="exact", output_dtype=None):
        self.transforms = list(transforms)
        pipeline = _v.Pipeline()
        dtype = None
        normalized = False
        for t in self.transforms:
            if isinstance(t, ToTensor):
                dtype = "float32"
            elif isinstance(t, PILToTensor):
                dtype = "uint8"
            elif isinstance(t, Normalize):
                if dtype != "float32":
                    raise ValueError("stoker.vision.Compose: Normalize needs ToTensor before it "
                                     "(a float tensor)")
                pipeline.then(t._spec)
                normalized = True
            elif isinstance(t, _Transform):
                if dtype is not None or normalized:
                    raise ValueError("stoker.vision.Compose: {!r} comes after ToTensor or "
                                     "PILToTensor; stoker converts to a tensor last (only "
                                     "Normalize may follow)".format(t))
                pipeline.then(t._spec)
            else:
                raise TypeError("stoker.vision.Compose: {!r} is not a stoker.vision transform; "
                                "torchvision's run in Python: give them to a Python dataset "
                                "(for example torchvision.datasets.ImageFolder)".format(t))
        if output_dtype is not None:
            if dtype == "uint8":
                raise ValueError("stoker.vision.Compose: output_dtype with PILToTensor")
            dtype = output_dtype
        pipeline.output(dtype or "uint8")
        pipeline.set_mode(mode)
        self.mode = mode
        self._pipeline = pipeline

    def __call__(self, image):
        """Runs the pipeline on encoded bytes (JPEG, PNG, WebP), a PIL image or a uint8 HWC
        array: a torch tensor. Inside a stoker.DataLoader's __getitem__, random transforms
        draw from the sample's generator; elsewhere from one seeded by torch's."""
        return self._pipeline(image)

    def __repr__(self):
        return "Compose({})".format(repr(self._pipeline))


def _pipeline(transform, name):
    """The C++ pipeline of `transform` (a Compose, one stoker transform, or None)."""
    if transform is None:
        return None
    if isinstance(transform, Compose):
        return transform._pipeline
    if isinstance(transform, (_Transform, ToTensor, PILToTensor)):
        return Compose([transform])._pipeline
    raise TypeError("{}: transform must be a stoker.vision transform (Compose, Resize, ...), "
                    "not {!r}; a Python callable needs a Python dataset (torchvision's "
                    "datasets work with stoker.DataLoader)".format(name, transform))


__all__ = ["Compose", "Resize", "CenterCrop", "RandomResizedCrop", "RandomCrop",
           "RandomHorizontalFlip", "ColorJitter", "Normalize", "ToTensor", "PILToTensor",
           "InterpolationMode"]
