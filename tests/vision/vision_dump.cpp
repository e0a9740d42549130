// vision_dump: runs stoker::vision pipelines and functional operations for the parity test
// (tests/vision/parity.py), which runs torchvision on the same files and compares.
//
//   vision_dump run JOBS OUTDIR   JOBS: lines "<id> <seed> <file> <spec>"; for each, the
//                                 pipeline's tensor goes to OUTDIR/<id>.bin and one line
//                                 "<id> <dtype> <shape> <trace>" to stdout
//   vision_dump fn JOBS OUTDIR    JOBS: lines "<id> <file> <op>"; the file decoded as RGB,
//                                 the functional op applied, its pixels (HWC) to
//                                 OUTDIR/<id>.bin and "<id> <height>x<width>x<channels>" out
//   vision_dump boxes W H N SEED [SCALE_LO SCALE_HI RATIO_LO RATIO_HI]
//                                 N RandomResizedCrop boxes "x y w h", one a line
//   vision_dump erase-boxes W H N SEED SCALE_LO SCALE_HI RATIO_LO RATIO_HI
//                                 N RandomErasing(p=1) boxes "x y w h" (0 0 0 0: none fits)
//   vision_dump kernel SIZE SIGMA GaussianBlur's 1-D kernel, one float32 a line (%a)
//   vision_dump magnitudes BINS W H
//                                 "<wide 0|1> <op> <bin> <magnitude %a>" for every op and bin
//   vision_dump decode FILE rgb|rgba|gray
//                                 "<height>x<width>x<channels> v v v ...": decode()'s pixels
//   vision_dump draws KIND N SEED the random parameters of N draws, one a line: KIND is
//                                 rotation (angle in [-30, 30]), blur (sigma in [0.1, 2]),
//                                 trivial or randaugment ("<op> <bin> <magnitude>" on 224 x 224)
//
// A spec is steps separated by ';', arguments by ':':
//   Resize:<size>[:bilinear|bicubic|nearest[:max_size]]   Resize:<h>x<w>[:...]
//   CenterCrop:<h>x<w>   RandomResizedCrop:<h>x<w>[:scale_lo:scale_hi:ratio_lo:ratio_hi[:interp]]
//   RandomCrop:<h>x<w>:<l>,<t>,<r>,<b>:<pad_if_needed
//   0|1>:<constant|edge|reflect|symmetric>:<R>,<G>,<B> Flip:<p>   VFlip:<p>
//   ColorJitter:<b>:<c>:<s>:<h>   Gray:<1|3>   RandomGray:<p> Blur:<kx>,<ky>:<sigma_lo>:<sigma_hi>
//   Rotate:<lo>,<hi>:<interp>:<expand 0|1>:<cx>,<cy>|-:<R>,<G>,<B>
//   Trivial:<bins>:<interp>:<R>,<G>,<B>   RandAug:<ops>:<magnitude>:<bins>:<interp>:<R>,<G>,<B>
//   Erase:<p>:<scale_lo>,<scale_hi>:<ratio_lo>,<ratio_hi>:<v0>,<v1>,<v2>|random
//   Normalize[:<mean>:<std>]   Out:<uint8|float32|bfloat16|float16>:<chw|hwc>   Mode:<exact|fast>
// The trace is "boxes=x,y,w,h/...|flips=0,1|jitters=o0o1o2o3,b,c,s,h/...|vflips=..|grays=..|
// sigmas=..|angles=..|augments=op,bin,magnitude;.../...|erasures=e,x,y,w,h/..." (factors "-"
// when off; floating-point values as %a); random erasing values go to OUTDIR/<id>.erase<k>.bin.
//
// An op (fn) is arguments separated by ':': vflip | gray:<n> | blur:<kx>,<ky>:<sx>,<sy> |
// rotate:<angle>:<interp>:<expand>:<cx>,<cy>|-:<R>,<G>,<B> |
// affine:<angle>:<tx>,<ty>:<scale>:<shx>,<shy>:<interp>:<R>,<G>,<B>:<cx>,<cy>|- |
// augment:<Op>:<magnitude>:<interp>:<R>,<G>,<B> | sharpness:<f> | posterize:<bits> |
// solarize:<t> | autocontrast | equalize; "L:" before an op runs it on the grey image.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "stoker/stoker.hpp"
#include "vision/torch_ops.hpp"

using namespace stoker;
using namespace stoker::vision;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

Size parse_size(const std::string& s) {
  const auto x = s.find('x');
  if (x == std::string::npos) return Size{std::stoi(s), std::stoi(s)};
  return Size{std::stoi(s.substr(0, x)), std::stoi(s.substr(x + 1))};
}

Interpolation parse_interp(const std::string& s) {
  if (s == "bicubic") return Interpolation::kBicubic;
  if (s == "nearest") return Interpolation::kNearest;
  return Interpolation::kBilinear;
}

std::array<std::uint8_t, 3> parse_fill(const std::string& s) {
  const std::vector<std::string> v = split(s, ',');
  return {static_cast<std::uint8_t>(std::stoi(v.at(0))),
          static_cast<std::uint8_t>(std::stoi(v.at(1))),
          static_cast<std::uint8_t>(std::stoi(v.at(2)))};
}

std::pair<double, double> parse_pair(const std::string& s) {
  const std::vector<std::string> v = split(s, ',');
  return {std::stod(v.at(0)), std::stod(v.at(1))};
}

std::optional<Point> parse_center(const std::string& s) {
  if (s == "-") return std::nullopt;
  const auto [x, y] = parse_pair(s);
  return Point{x, y};
}

Pipeline parse_spec(const std::string& spec) {
  Pipeline p;
  for (const std::string& step : split(spec, ';')) {
    const std::vector<std::string> a = split(step, ':');
    const std::string& name = a.at(0);
    auto arg = [&a](std::size_t i, const std::string& otherwise) {
      return i < a.size() ? a[i] : otherwise;
    };
    if (name == "Resize") {
      const Interpolation interp = parse_interp(arg(2, "bilinear"));
      if (a.at(1).find('x') != std::string::npos) {
        p.then(Resize(parse_size(a[1]), interp));
      } else {
        p.then(Resize(std::stoi(a[1]), interp, std::stoi(arg(3, "0"))));
      }
    } else if (name == "CenterCrop") {
      p.then(CenterCrop(parse_size(a.at(1))));
    } else if (name == "RandomResizedCrop") {
      p.then(RandomResizedCrop(parse_size(a.at(1)),
                               {std::stod(arg(2, "0.08")), std::stod(arg(3, "1.0"))},
                               {std::stod(arg(4, "0.75")), std::stod(arg(5, "1.3333333333333333"))},
                               parse_interp(arg(6, "bilinear"))));
    } else if (name == "RandomCrop") {
      const std::vector<std::string> pad = split(arg(2, "0,0,0,0"), ',');
      const std::string mode = arg(4, "constant");
      const PaddingMode m = mode == "edge"        ? PaddingMode::kEdge
                            : mode == "reflect"   ? PaddingMode::kReflect
                            : mode == "symmetric" ? PaddingMode::kSymmetric
                                                  : PaddingMode::kConstant;
      p.then(RandomCrop(parse_size(a.at(1)),
                        Padding(std::stoi(pad.at(0)), std::stoi(pad.at(1)), std::stoi(pad.at(2)),
                                std::stoi(pad.at(3))),
                        arg(3, "0") == "1", parse_fill(arg(5, "0,0,0")), m));
    } else if (name == "Flip") {
      p.then(RandomHorizontalFlip(std::stod(arg(1, "0.5"))));
    } else if (name == "VFlip") {
      p.then(RandomVerticalFlip(std::stod(arg(1, "0.5"))));
    } else if (name == "ColorJitter") {
      p.then(ColorJitter(std::stod(a.at(1)), std::stod(a.at(2)), std::stod(a.at(3)),
                         std::stod(a.at(4))));
    } else if (name == "Gray") {
      p.then(Grayscale(std::stoi(arg(1, "1"))));
    } else if (name == "RandomGray") {
      p.then(RandomGrayscale(std::stod(arg(1, "0.1"))));
    } else if (name == "Blur") {
      const auto [kx, ky] = parse_pair(a.at(1));
      p.then(GaussianBlur(std::pair<int, int>{static_cast<int>(kx), static_cast<int>(ky)},
                          {std::stod(a.at(2)), std::stod(a.at(3))}));
    } else if (name == "Rotate") {
      p.then(RandomRotation(parse_pair(a.at(1)), parse_interp(arg(2, "nearest")),
                            arg(3, "0") == "1", parse_center(arg(4, "-")),
                            parse_fill(arg(5, "0,0,0"))));
    } else if (name == "Trivial") {
      p.then(TrivialAugmentWide(std::stoi(arg(1, "31")), parse_interp(arg(2, "nearest")),
                                parse_fill(arg(3, "0,0,0"))));
    } else if (name == "RandAug") {
      p.then(RandAugment(std::stoi(arg(1, "2")), std::stoi(arg(2, "9")), std::stoi(arg(3, "31")),
                         parse_interp(arg(4, "nearest")), parse_fill(arg(5, "0,0,0"))));
    } else if (name == "Erase") {
      const auto scale = parse_pair(a.at(2));
      const auto ratio = parse_pair(a.at(3));
      if (a.at(4) == "random") {
        p.then(RandomErasing(std::stod(a.at(1)), scale, ratio, RandomErasing::kRandom));
      } else {
        const std::vector<std::string> v = split(a.at(4), ',');
        p.then(RandomErasing(
            std::stod(a.at(1)), scale, ratio,
            std::array<float, 3>{std::stof(v.at(0)), std::stof(v.at(1)), std::stof(v.at(2))}));
      }
    } else if (name == "Normalize") {
      if (a.size() > 2) {
        p.then(Normalize(std::stof(a[1]), std::stof(a[2])));
      } else {
        p.then(Normalize(kImageNetMean, kImageNetStd));
      }
    } else if (name == "Out") {
      const std::string& d = a.at(1);
      const DType dtype = d == "float32"    ? DType::kFloat32
                          : d == "bfloat16" ? DType::kBFloat16
                          : d == "float16"  ? DType::kFloat16
                                            : DType::kUInt8;
      p.output(dtype, arg(2, "chw") == "hwc" ? Layout::kHWC : Layout::kCHW);
    } else if (name == "Mode") {
      p.mode(a.at(1) == "fast" ? Mode::kFast : Mode::kExact);
    } else {
      throw std::invalid_argument("vision_dump: unknown step " + name);
    }
  }
  return p;
}

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

std::string factor(const std::optional<double>& v) { return v ? hex(*v) : "-"; }

std::string bools(const std::vector<bool>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i] ? 1 : 0);
  return s;
}

std::string trace_text(const Trace& t) {
  std::string s = "boxes=";
  for (std::size_t i = 0; i < t.boxes.size(); ++i) {
    const Rect& b = t.boxes[i];
    s += (i ? "/" : "") + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
         std::to_string(b.width) + "," + std::to_string(b.height);
  }
  s += "|flips=" + bools(t.flips);
  s += "|jitters=";
  for (std::size_t i = 0; i < t.jitters.size(); ++i) {
    const ColorJitter::Params& j = t.jitters[i];
    s += i ? "/" : "";
    for (auto o : j.order) s += std::to_string(o);
    s += "," + factor(j.brightness) + "," + factor(j.contrast) + "," + factor(j.saturation) + "," +
         factor(j.hue);
  }
  s += "|vflips=" + bools(t.vflips) + "|grays=" + bools(t.grays) + "|sigmas=";
  for (std::size_t i = 0; i < t.sigmas.size(); ++i) s += (i ? "," : "") + hex(t.sigmas[i]);
  s += "|angles=";
  for (std::size_t i = 0; i < t.angles.size(); ++i) s += (i ? "," : "") + hex(t.angles[i]);
  s += "|augments=";
  for (std::size_t i = 0; i < t.augments.size(); ++i) {
    s += i ? "/" : "";
    for (std::size_t k = 0; k < t.augments[i].size(); ++k) {
      const AugmentStep& a = t.augments[i][k];
      s += (k ? ";" : "") + std::string(augment_op_name(a.op)) + "," + std::to_string(a.bin) + "," +
           hex(a.magnitude);
    }
  }
  s += "|erasures=";
  for (std::size_t i = 0; i < t.erasures.size(); ++i) {
    const RandomErasing::Params& e = t.erasures[i];
    s += (i ? "/" : "") + std::to_string(e.erase ? 1 : 0) + "," + std::to_string(e.box.x) + "," +
         std::to_string(e.box.y) + "," + std::to_string(e.box.width) + "," +
         std::to_string(e.box.height);
  }
  return s;
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const void* data, std::size_t n) {
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// Runs `job` on each non-empty line of the file `jobs` (its fields as a stream), printing
// "<id> error - <what>" for a job that throws.
template <class Job>
int for_each_job(const std::string& jobs, Job job) {
  std::ifstream in(jobs);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string id;
    fields >> id;
    try {
      job(id, fields);
    } catch (const std::exception& e) {
      std::cout << id << " error - " << e.what() << "\n";
    }
  }
  return 0;
}

int run_jobs(const std::string& jobs, const std::string& outdir) {
  return for_each_job(jobs, [&](const std::string& id, std::istringstream& fields) {
    std::string file, spec;
    std::uint64_t seed = 0;
    fields >> seed >> file >> spec;
    const Pipeline p = spec == "-" ? Pipeline() : parse_spec(spec);
    const std::vector<std::uint8_t> bytes = read_file(file);
    Generator rng(seed);
    Trace trace;
    const Tensor t = p.run(bytes, rng, file, &trace);
    write_file(outdir + "/" + id + ".bin", t.raw_data(), t.nbytes());
    for (std::size_t k = 0; k < trace.erasures.size(); ++k) {
      const std::vector<float>& v = trace.erasures[k].values;
      if (!v.empty()) {
        write_file(outdir + "/" + id + ".erase" + std::to_string(k) + ".bin", v.data(),
                   v.size() * sizeof(float));
      }
    }
    std::string shape;
    for (std::size_t d = 0; d < t.dim(); ++d) shape += (d ? "x" : "") + std::to_string(t.size(d));
    std::cout << id << " " << dtype_name(t.dtype()) << " " << shape << " " << trace_text(trace)
              << "\n";
  });
}

void apply_fn(const std::string& op, Image& image) {
  const std::vector<std::string> a = split(op, ':');
  const std::string& name = a.at(0);
  Image out;
  if (name == "L") {
    functional::rgb_to_grayscale(image, 1, out);
    image = out;
    return apply_fn(op.substr(2), image);
  }
  if (name == "vflip") {
    functional::vflip(image);
  } else if (name == "gray") {
    functional::rgb_to_grayscale(image, std::stoi(a.at(1)), out);
    image = out;
  } else if (name == "blur") {
    const auto [kx, ky] = parse_pair(a.at(1));
    const auto [sx, sy] = parse_pair(a.at(2));
    functional::gaussian_blur(image, static_cast<int>(kx), static_cast<int>(ky), sx, sy, out);
    image = out;
  } else if (name == "rotate") {
    functional::rotate(image, std::stod(a.at(1)), parse_interp(a.at(2)), a.at(3) == "1",
                       parse_center(a.at(4)), parse_fill(a.at(5)), out);
    image = out;
  } else if (name == "affine") {
    const auto [tx, ty] = parse_pair(a.at(2));
    functional::affine(image, std::stod(a.at(1)), {static_cast<int>(tx), static_cast<int>(ty)},
                       std::stod(a.at(3)), parse_pair(a.at(4)), parse_interp(a.at(5)),
                       parse_fill(a.at(6)), parse_center(a.at(7)), out);
    image = out;
  } else if (name == "augment") {
    AugmentStep step;
    for (int k = 0; k < kAugmentOps; ++k) {
      if (augment_op_name(static_cast<AugmentOp>(k)) == a.at(1))
        step.op = static_cast<AugmentOp>(k);
    }
    step.magnitude = std::stod(a.at(2));
    functional::apply_augment(image, step, parse_interp(a.at(3)), parse_fill(a.at(4)));
  } else if (name == "sharpness") {
    functional::adjust_sharpness(image, std::stod(a.at(1)));
  } else if (name == "posterize") {
    functional::posterize(image, std::stoi(a.at(1)));
  } else if (name == "solarize") {
    functional::solarize(image, std::stod(a.at(1)));
  } else if (name == "autocontrast") {
    functional::autocontrast(image);
  } else if (name == "equalize") {
    functional::equalize(image);
  } else {
    throw std::invalid_argument("vision_dump: unknown op " + name);
  }
}

int run_fns(const std::string& jobs, const std::string& outdir) {
  return for_each_job(jobs, [&](const std::string& id, std::istringstream& fields) {
    std::string file, op;
    fields >> file >> op;
    Image image = decode(read_file(file), {}, file);
    apply_fn(op, image);
    write_file(outdir + "/" + id + ".bin", image.pixels.data(),
               image.row_bytes() * static_cast<std::size_t>(image.height));
    std::cout << id << " " << image.height << "x" << image.width << "x" << image.channels << "\n";
  });
}

int decode_values(char** argv) {
  const std::string color = argv[3];
  DecodeOptions options;
  options.color = color == "rgba"   ? ColorMode::kRGBA
                  : color == "gray" ? ColorMode::kGray
                                    : ColorMode::kRGB;
  const Image image = decode(read_file(argv[2]), options, argv[2]);
  std::printf("%dx%dx%d", image.height, image.width, image.channels);
  for (std::size_t i = 0; i < image.row_bytes() * static_cast<std::size_t>(image.height); ++i) {
    std::printf(" %d", image.pixels[i]);
  }
  std::printf("\n");
  return 0;
}

int boxes(int argc, char** argv) {
  if (argc < 6) return 2;
  const Size size{std::atoi(argv[3]), std::atoi(argv[2])};
  const long n = std::atol(argv[4]);
  Generator rng(std::strtoull(argv[5], nullptr, 10));
  std::pair<double, double> scale{0.08, 1.0};
  std::pair<double, double> ratio{3.0 / 4.0, 4.0 / 3.0};
  if (argc >= 10) {
    scale = {std::atof(argv[6]), std::atof(argv[7])};
    ratio = {std::atof(argv[8]), std::atof(argv[9])};
  }
  const RandomResizedCrop rrc(224, scale, ratio);
  for (long i = 0; i < n; ++i) {
    const Rect b = rrc.sample(rng, size);
    std::printf("%d %d %d %d\n", b.x, b.y, b.width, b.height);
  }
  return 0;
}

int erase_boxes(int argc, char** argv) {
  if (argc < 10) return 2;
  const Size size{std::atoi(argv[3]), std::atoi(argv[2])};
  const long n = std::atol(argv[4]);
  Generator rng(std::strtoull(argv[5], nullptr, 10));
  const RandomErasing erasing(1.0, {std::atof(argv[6]), std::atof(argv[7])},
                              {std::atof(argv[8]), std::atof(argv[9])});
  for (long i = 0; i < n; ++i) {
    const RandomErasing::Params e = erasing.sample(rng, size, 3);
    const Rect b = e.erase ? e.box : Rect{};
    std::printf("%d %d %d %d\n", b.x, b.y, b.width, b.height);
  }
  return 0;
}

int kernel(char** argv) {
  for (float v : vision::detail::gaussian_kernel1d(std::atoi(argv[2]), std::atof(argv[3]))) {
    std::printf("%a\n", static_cast<double>(v));
  }
  return 0;
}

int magnitudes(char** argv) {
  const int bins = std::atoi(argv[2]);
  const Size image{std::atoi(argv[4]), std::atoi(argv[3])};
  for (int wide = 0; wide < 2; ++wide) {
    for (int k = 0; k < kAugmentOps; ++k) {
      const auto op = static_cast<AugmentOp>(k);
      for (int bin = 0; bin < bins; ++bin) {
        std::printf("%d %s %d %a\n", wide, std::string(augment_op_name(op)).c_str(), bin,
                    augment_magnitude(op, bin, bins, wide == 1, image));
      }
    }
  }
  return 0;
}

int draws(char** argv) {
  const std::string kind = argv[2];
  const long n = std::atol(argv[3]);
  Generator rng(std::strtoull(argv[4], nullptr, 10));
  const RandomRotation rotation(30.0);
  const GaussianBlur blur(5);
  const TrivialAugmentWide trivial;
  const RandAugment rand_augment;
  for (long i = 0; i < n; ++i) {
    if (kind == "rotation") {
      std::printf("%.17g\n", rotation.sample(rng));
    } else if (kind == "blur") {
      std::printf("%.17g\n", blur.sample(rng));
    } else {
      const auto steps = kind == "trivial" ? trivial.sample(rng, {224, 224})
                                           : rand_augment.sample(rng, {224, 224});
      for (const AugmentStep& s : steps) {
        std::printf("%s %d %.17g\n", std::string(augment_op_name(s.op)).c_str(), s.bin,
                    s.magnitude);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "run" && argc == 4) return run_jobs(argv[2], argv[3]);
  if (mode == "fn" && argc == 4) return run_fns(argv[2], argv[3]);
  if (mode == "boxes") return boxes(argc, argv);
  if (mode == "erase-boxes") return erase_boxes(argc, argv);
  if (mode == "kernel" && argc == 4) return kernel(argv);
  if (mode == "magnitudes" && argc == 5) return magnitudes(argv);
  if (mode == "draws" && argc == 5) return draws(argv);
  if (mode == "decode" && argc == 4) return decode_values(argv);
  std::fprintf(
      stderr,
      "usage: vision_dump run JOBS OUTDIR | fn JOBS OUTDIR | boxes W H N SEED [SCALE_LO "
      "SCALE_HI RATIO_LO RATIO_HI] | erase-boxes W H N SEED SCALE_LO SCALE_HI RATIO_LO "
      "RATIO_HI | kernel SIZE SIGMA | magnitudes BINS W H | draws KIND N SEED | decode FILE "
      "rgb|rgba|gray\n");
  return 2;
}
