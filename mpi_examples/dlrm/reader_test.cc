// The Criteo TSV reader on malformed input: every kind of bad row is counted
// and skipped, good rows around them still load, an empty file loads nothing
// without failing, and the synthetic generator's TSV round-trips through it.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "data.h"

namespace {

using dlrm::CriteoCounts;
using dlrm::CriteoSource;

std::string tempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/spccl_dlrm_" + std::to_string(::getpid()) + "_" + name;
}

std::string goodLine(int label) {
  std::string s = std::to_string(label);
  for (int k = 0; k < 13; ++k) s += "\t" + (k == 2 ? std::string() : std::to_string(k * 3));
  for (int c = 0; c < 26; ++c)
    s += c == 5 ? std::string("\t") : "\t" + std::string("0000abc") + static_cast<char>('0' + c % 10);
  return s;
}

bool parse(const std::string& line, CriteoCounts* counts) {
  float dense[13], label = 0;
  uint32_t cats[26];
  return dlrm::parseCriteoLine(line.data(), line.data() + line.size(), dense, cats, &label, counts);
}

TEST(CriteoReader, GoodLineParses) {
  CriteoCounts n;
  float dense[13], label = -1;
  uint32_t cats[26];
  const std::string line = goodLine(1);
  ASSERT_TRUE(dlrm::parseCriteoLine(line.data(), line.data() + line.size(), dense, cats, &label, &n));
  EXPECT_EQ(label, 1.0f);
  EXPECT_FLOAT_EQ(dense[1], std::log1p(3.0f));
  EXPECT_EQ(dense[2], 0.0f);  // missing
  EXPECT_EQ(cats[0], 0xabc0u);
  EXPECT_EQ(cats[5], 0xffffffffu);  // missing
  EXPECT_EQ(n.parsed, 1u);
  EXPECT_EQ(n.malformed(), 0u);
}

TEST(CriteoReader, EachKindOfBadLineIsCountedOnce) {
  CriteoCounts n;
  std::string l = goodLine(0);
  EXPECT_FALSE(parse(l.substr(0, l.size() / 2), &n));  // cut mid-line
  EXPECT_FALSE(parse("", &n));                         // empty line
  EXPECT_FALSE(parse(l + "\tdeadbeef", &n));           // 41 fields
  EXPECT_FALSE(parse("2" + l.substr(1), &n));          // label 2
  std::string bad = l;
  bad.replace(bad.find('\t') + 1, 1, "q");  // first integer column
  EXPECT_FALSE(parse(bad, &n));
  EXPECT_FALSE(parse(l.substr(0, l.rfind('\t') + 1) + "xyz", &n));        // last categorical not hex
  EXPECT_FALSE(parse(l.substr(0, l.rfind('\t') + 1) + "123456789", &n));  // 9 hex digits
  EXPECT_TRUE(parse(l + "\r", &n));                                       // CRLF
  EXPECT_EQ(n.truncated, 2u);
  EXPECT_EQ(n.extraFields, 1u);
  EXPECT_EQ(n.badLabel, 1u);
  EXPECT_EQ(n.badInteger, 1u);
  EXPECT_EQ(n.badCategorical, 2u);
  EXPECT_EQ(n.parsed, 1u);
  EXPECT_EQ(n.malformed(), 7u);
}

TEST(CriteoReader, ShippedMalformedFile) {
  CriteoSource src;
  std::string error;
  ASSERT_TRUE(src.load(DLRM_TESTDATA "/malformed.tsv", std::vector<int64_t>(26, 1000), 0, 0.1, &error)) << error;
  const CriteoCounts& n = src.counts();
  EXPECT_EQ(n.lines, 29u);
  EXPECT_EQ(n.parsed, 21u);
  EXPECT_EQ(n.truncated, 3u);
  EXPECT_EQ(n.badInteger, 2u);
  EXPECT_EQ(n.badLabel, 1u);
  EXPECT_EQ(n.badCategorical, 1u);
  EXPECT_EQ(n.extraFields, 1u);
  EXPECT_EQ(src.evalSize(), 2u);
  EXPECT_EQ(src.trainSize(), 19u);
  dlrm::Batch b;
  src.train(0, 40, &b);  // wraps around the 19 training rows
  for (int32_t id : b.ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 1000);
  }
}

TEST(CriteoReader, EmptyAndMissingFiles) {
  const std::string empty = tempPath("empty.tsv");
  { std::ofstream(empty.c_str()); }
  CriteoSource src;
  std::string error;
  ASSERT_TRUE(src.load(empty, std::vector<int64_t>(26, 100), 0, 0.1, &error));
  EXPECT_EQ(src.counts().lines, 0u);
  EXPECT_EQ(src.trainSize(), 0u);
  EXPECT_EQ(src.evalSize(), 0u);
  std::remove(empty.c_str());
  EXPECT_FALSE(src.load(tempPath("does-not-exist.tsv"), std::vector<int64_t>(26, 100), 0, 0.1, &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

TEST(CriteoReader, SyntheticTsvRoundTrips) {
  dlrm::SyntheticConfig sc;
  sc.tableSizes.assign(26, 500);
  dlrm::SyntheticSource synth(sc);
  const std::string path = tempPath("synth.tsv");
  std::string error;
  ASSERT_TRUE(synth.writeTsv(path, 50, &error)) << error;
  CriteoSource src;
  ASSERT_TRUE(src.load(path, sc.tableSizes, 0, 0.0, &error)) << error;
  std::remove(path.c_str());
  EXPECT_EQ(src.counts().parsed, 50u);
  EXPECT_EQ(src.counts().malformed(), 0u);
  dlrm::Batch a, b;
  synth.train(0, 50, &a);
  src.train(0, 50, &b);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a.labels[i], b.labels[i]);
    for (int k = 0; k < 13; ++k) EXPECT_NEAR(a.dense[i * 13 + k], b.dense[i * 13 + k], 1e-5f);
    for (int t = 0; t < 26; ++t) EXPECT_EQ(1 + a.id(i, t, 0) % 499, b.id(i, t, 0));
  }
}

TEST(TableSizes, Parse) {
  std::vector<int64_t> s;
  std::string error;
  ASSERT_TRUE(dlrm::parseTableSizes("300:1000000", 26, &s, &error));
  EXPECT_EQ(s.front(), 300);
  EXPECT_EQ(s.back(), 1000000);
  ASSERT_TRUE(dlrm::parseTableSizes("5,6,7", 3, &s, &error));
  EXPECT_EQ(s[2], 7);
  EXPECT_FALSE(dlrm::parseTableSizes("5,6", 3, &s, &error));
  EXPECT_FALSE(dlrm::parseTableSizes("5,x,6", 3, &s, &error));
  EXPECT_FALSE(dlrm::parseTableSizes("1:10", 3, &s, &error));
}

}  // namespace
