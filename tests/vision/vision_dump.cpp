// vision_dump: runs stoker::vision pipelines for the parity test (tests/vision/parity.py),
// which runs torchvision on the same files and compares.
//
//   vision_dump run JOBS OUTDIR   JOBS: lines "<id> <seed> <file> <spec>"; for each, the
//                                 pipeline's tensor goes to OUTDIR/<id>.bin and one line
//                                 "<id> <dtype> <shape> <trace>" to stdout
//   vision_dump boxes W H N SEED [SCALE_LO SCALE_HI RATIO_LO RATIO_HI]
//                                 N RandomResizedCrop boxes "x y w h", one a line
//
// A spec is steps separated by ';', arguments by ':':
//   Resize:<size>[:bilinear|bicubic|nearest]   Resize:<h>x<w>[:...]   CenterCrop:<h>x<w>
//   RandomResizedCrop:<h>x<w>[:scale_lo:scale_hi:ratio_lo:ratio_hi[:interpolation]]
//   RandomCrop:<h>x<w>:<l>,<t>,<r>,<b>:<pad_if_needed
//   0|1>:<constant|edge|reflect|symmetric>:<R>,<G>,<B> Flip:<p>   ColorJitter:<b>:<c>:<s>:<h>
//   Normalize   Out:<uint8|float32|bfloat16|float16>:<chw|hwc> Mode:<exact|fast>
// The trace is "boxes=x,y,w,h/...|flips=0,1|jitters=o0o1o2o3,b,c,s,h/..." (factors "-" when
// off).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "stoker/stoker.hpp"

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
        p.then(Resize(std::stoi(a[1]), interp));
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
      const std::vector<std::string> fill = split(arg(5, "0,0,0"), ',');
      const std::string mode = arg(4, "constant");
      const PaddingMode m = mode == "edge"        ? PaddingMode::kEdge
                            : mode == "reflect"   ? PaddingMode::kReflect
                            : mode == "symmetric" ? PaddingMode::kSymmetric
                                                  : PaddingMode::kConstant;
      p.then(RandomCrop(parse_size(a.at(1)),
                        Padding(std::stoi(pad.at(0)), std::stoi(pad.at(1)), std::stoi(pad.at(2)),
                                std::stoi(pad.at(3))),
                        arg(3, "0") == "1",
                        {static_cast<std::uint8_t>(std::stoi(fill.at(0))),
                         static_cast<std::uint8_t>(std::stoi(fill.at(1))),
                         static_cast<std::uint8_t>(std::stoi(fill.at(2)))},
                        m));
    } else if (name == "Flip") {
      p.then(RandomHorizontalFlip(std::stod(arg(1, "0.5"))));
    } else if (name == "ColorJitter") {
      p.then(ColorJitter(std::stod(a.at(1)), std::stod(a.at(2)), std::stod(a.at(3)),
                         std::stod(a.at(4))));
    } else if (name == "Normalize") {
      p.then(Normalize(kImageNetMean, kImageNetStd));
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

std::string factor(const std::optional<double>& v) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", *v);
  return buf;
}

std::string trace_text(const Trace& t) {
  std::string s = "boxes=";
  for (std::size_t i = 0; i < t.boxes.size(); ++i) {
    const Rect& b = t.boxes[i];
    s += (i ? "/" : "") + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
         std::to_string(b.width) + "," + std::to_string(b.height);
  }
  s += "|flips=";
  for (std::size_t i = 0; i < t.flips.size(); ++i)
    s += (i ? "," : "") + std::to_string(t.flips[i] ? 1 : 0);
  s += "|jitters=";
  for (std::size_t i = 0; i < t.jitters.size(); ++i) {
    const ColorJitter::Params& j = t.jitters[i];
    s += i ? "/" : "";
    for (auto o : j.order) s += std::to_string(o);
    s += "," + factor(j.brightness) + "," + factor(j.contrast) + "," + factor(j.saturation) + "," +
         factor(j.hue);
  }
  return s;
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

int run_jobs(const std::string& jobs, const std::string& outdir) {
  std::ifstream in(jobs);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string id, file, spec;
    std::uint64_t seed = 0;
    fields >> id >> seed >> file >> spec;
    try {
      const Pipeline p = spec == "-" ? Pipeline() : parse_spec(spec);
      const std::vector<std::uint8_t> bytes = read_file(file);
      Generator rng(seed);
      Trace trace;
      const Tensor t = p.run(bytes, rng, file, &trace);
      std::ofstream(outdir + "/" + id + ".bin", std::ios::binary)
          .write(reinterpret_cast<const char*>(t.raw_data()),
                 static_cast<std::streamsize>(t.nbytes()));
      std::string shape;
      for (std::size_t d = 0; d < t.dim(); ++d) shape += (d ? "x" : "") + std::to_string(t.size(d));
      std::cout << id << " " << dtype_name(t.dtype()) << " " << shape << " " << trace_text(trace)
                << "\n";
    } catch (const std::exception& e) {
      std::cout << id << " error - " << e.what() << "\n";
    }
  }
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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "run" && argc == 4) return run_jobs(argv[2], argv[3]);
  if (mode == "boxes") return boxes(argc, argv);
  std::fprintf(stderr,
               "usage: vision_dump run JOBS OUTDIR | vision_dump boxes W H N SEED [SCALE_LO "
               "SCALE_HI RATIO_LO RATIO_HI]\n");
  return 2;
}
