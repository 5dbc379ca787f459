// The archive's debug records (*.debug_pkl: source ranges of the saved code), checked before
// LibTorch uses them. LibTorch unpickles a record the first time a node's source range is
// looked up and indexes it without bounds checks (its string table by the indices each range
// holds): a damaged record that still unpickles crashes the process (SIGSEGV) instead of
// throwing. The checks below are the shapes its deserializer assumes
// (torch/csrc/jit/serialization/source_range_serialization.cpp, torch 2.11).
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/mobile/type_parser.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/source_range_serialization.h>

#include <sstream>

#include "steps.h"

namespace foldnorm::torchscript {
namespace {

namespace jit = torch::jit;

/// Throws std::runtime_error naming what is wrong with one source range.
void checkRange(const c10::IValue& range, std::size_t texts) {
  auto fail = [](const std::string& what) { throw std::runtime_error(what); };
  if (!range.isTuple() || range.toTupleRef().elements().size() != 3) fail("a source range is not a 3-tuple");
  const auto& r = range.toTupleRef().elements();
  if (!r[1].isInt() || !r[2].isInt()) fail("a source range's start or end is not an int");
  if (r[1].toInt() < 0 || r[2].toInt() < r[1].toInt()) fail("a source range ends before it starts");
  if (!r[0].isTuple() || r[0].toTupleRef().elements().size() != 3) fail("a source is not a 3-tuple");
  const auto& s = r[0].toTupleRef().elements();
  if (!s[2].isInt()) fail("a source's first line is not an int");
  if (texts == 0) {  // the format without a string table: (text, filename or None, line)
    if (!s[0].isString() || !(s[1].isString() || s[1].isNone())) fail("a source's text or file name is not a string");
    return;
  }
  if (!s[0].isIntList() || !s[1].isInt()) fail("a source's line or file indices are not ints");
  auto inTable = [&](int64_t i) { return i >= 0 && static_cast<std::size_t>(i) < texts; };
  if (!inTable(s[1].toInt())) fail("a source's file index is outside the string table");
  for (auto i : s[0].toIntVector())
    if (!inTable(i)) fail("a source's line index is outside the string table");
}

void checkRecord(const char* data, std::size_t size) {
  auto fail = [](const std::string& what) { throw std::runtime_error(what); };
  c10::TypePtr (*parser)(const std::string&) = c10::parseType;  // as LibTorch reads these records
  auto top = jit::unpickle(data, size, nullptr, {}, parser);
  if (!top.isTuple() || top.toTupleRef().elements().empty()) fail("not a non-empty tuple");
  const auto& items = top.toTupleRef().elements();
  std::size_t texts = 0;
  c10::IValue rows = top;
  if (items[0].isString() && items[0].toStringRef() == jit::kFormatWithStringTable) {
    if (items.size() != 3 || !items[1].isTuple() || !items[2].isTuple()) fail("a string-table record is not (tag, table, rows)");
    for (const auto& t : items[1].toTupleRef().elements())
      if (!t.isString()) fail("the string table holds a non-string");
    texts = items[1].toTupleRef().elements().size();
    rows = items[2];
  }
  for (const auto& row : rows.toTupleRef().elements()) {
    if (!row.isTuple() || row.toTupleRef().elements().size() <= jit::kSourceRangeIndex) fail("a row is too short");
    const auto& r = row.toTupleRef().elements();
    if (!r[jit::kByteOffsetIndex].isInt()) fail("a row's byte offset is not an int");
    checkRange(r[jit::kSourceRangeIndex], texts);
  }
}

}  // namespace

std::string damagedDebugRecord(const std::string& path) {
  try {
    // Read from the file record by record: the debug records are a small part of a model.
    caffe2::serialize::PyTorchStreamReader reader(path);
    for (const auto& name : reader.getAllRecords()) {
      if (name.size() < 10 || name.compare(name.size() - 10, 10, ".debug_pkl") != 0) continue;
      try {
        auto [data, size] = reader.getRecord(name);
        checkRecord(static_cast<const char*>(data.get()), size);
      } catch (const std::exception& e) {
        return name + ": " + firstLine(e.what());
      }
    }
  } catch (const std::exception&) {
    // Not a readable zip: jit::load says so in its own words (see archive.cpp).
  }
  return {};
}

}  // namespace foldnorm::torchscript
