// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_etcd_json.c — libFuzzer harness for the JSON reader of the etcd store's answers
 * (src/boot/json_lite.c): the input is an answer body as an etcd member (or anyone posing as one)
 * could send it. A document that parses is walked as store_etcd.c walks it — the kvs of a range,
 * the responses of a txn, the error code — and every token must lie inside the text with its
 * subtree after it; libFuzzer with ASan/UBSan reports a crash, an out-of-bounds access, a leak or
 * a hang.
 *
 * Build and run: tests/fuzz/README.md (`make fuzz`); seeds in tests/fuzz/corpus/etcd_json/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "boot/json_lite.h"
#include "core/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk_kvs(const json_lite_doc *doc, int at) {
  int kvs = json_lite_member(doc, at, "kvs");
  for (int i = 0;; i++) {
    int kv = json_lite_element(doc, kvs, i);
    if (kv < 0) break;
    int64_t v;
    json_lite_int64(doc, json_lite_member(doc, kv, "create_revision"), &v);
    json_lite_member(doc, kv, "key");
    json_lite_member(doc, kv, "value");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_lite_doc doc;
  if (json_lite_parse((const char *)data, size, 4096, &doc) != STRATA_OK) return 0;
  for (int t = 0; t < doc.ntokens; t++) {
    const json_lite_token *k = &doc.tokens[t];
    if (k->start > k->end || k->end > size || k->after <= t || k->after > doc.ntokens) abort();
  }
  int64_t v;
  json_lite_int64(&doc, json_lite_member(&doc, 0, "code"), &v);
  json_lite_int64(&doc, json_lite_member(&doc, 0, "count"), &v);
  json_lite_true(&doc, json_lite_member(&doc, 0, "succeeded"));
  walk_kvs(&doc, 0);
  int responses = json_lite_member(&doc, 0, "responses");
  for (int i = 0;; i++) {
    int r = json_lite_element(&doc, responses, i);
    if (r < 0) break;
    walk_kvs(&doc, json_lite_member(&doc, r, "response_range"));
  }
  json_lite_free(&doc);
  return 0;
}
