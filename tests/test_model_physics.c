// SPDX-License-Identifier: Apache-2.0
/* test_model_physics.c — the link physics of src/model/physics.c against published numbers, each
 * check naming its source. */
#include <math.h>
#include <stdio.h>

#include "model/codec.h"
#include "model/physics.h"
#include "helpers/check.h"

/* The codec figures: every lossy encoding has a default on one core, the block encodings
 * encode slower than they decode; this core measures each (strata bench --codec) and refuses
 * what it cannot time. */
static void test_codec(void) {
  static const strata_compress lossy[] = {STRATA_COMPRESS_BF16, STRATA_COMPRESS_F16,
                                          STRATA_COMPRESS_INT8, STRATA_COMPRESS_FP8,
                                          STRATA_COMPRESS_INT4};
  for (size_t i = 0; i < sizeof lossy / sizeof lossy[0]; i++) {
    double e = 0, d = 0;
    strata_codec_core_gbps(lossy[i], &e, &d);
    CHECK(e > 0 && d > 0, "a default codec rate for every lossy encoding");
    strata_codec_rate rate;
    CHECK(strata_codec_measure(lossy[i], 65536, 2, &rate) == STRATA_OK && rate.encode_gbps > 0 &&
              rate.decode_gbps > 0,
          "this core encodes and decodes every lossy encoding within its error bound");
  }
  double e = 1, d = 1;
  strata_codec_core_gbps(STRATA_COMPRESS_NONE, &e, &d);
  CHECK(e == 0 && d == 0, "no codec for f32");
  strata_codec_core_gbps(STRATA_COMPRESS_INT8, &e, &d);
  CHECK(e < d, "int8 scans each block's range before coding it: encoding is the slower side");
  strata_codec_rate rate;
  CHECK(strata_codec_measure(STRATA_COMPRESS_NONE, 65536, 2, &rate) == STRATA_ERR_INVALID_ARG &&
            strata_codec_measure(STRATA_COMPRESS_INT8, 0, 2, &rate) == STRATA_ERR_INVALID_ARG,
        "nothing to time is refused");
}

int main(void) {
  test_codec();
  /* light in fiber, 4.9 µs/km one way ≈ 1 ms RTT per 100 km (NetApp MetroCluster ISL docs) */
  CHECK_NEAR("fiber 100 km one way us", strata_fiber_delay_us(100), 490, 1e-9);
  CHECK_NEAR("fiber 100 km rtt ms", strata_fiber_rtt_ms(100), 0.98, 1e-9);
  CHECK_NEAR("fiber negative km", strata_fiber_delay_us(-3), 0, 0);
  /* optics reach (Juniper coherent optics docs; MetroX-3 trade press) */
  CHECK_NEAR("400ZR reach", strata_optic_reach_km(STRATA_OPTIC_ZR), 120, 0);
  CHECK_NEAR("MetroX-3 reach", strata_optic_reach_km(STRATA_OPTIC_METROX3), 40, 0);
  CHECK_NEAR("OpenZR+ reduced", strata_optic_reach_km(STRATA_OPTIC_ZR_PLUS_REDUCED), 2000, 0);
  /* PFC headroom per km (derived from 4.9 µs/km: ~123 KB/km at 100G, ~490 at 400G, ~980 at 800G) */
  CHECK_NEAR("headroom/km 100G", strata_pfc_headroom_per_km_bytes(100), 123e3, 1.5e3);
  CHECK_NEAR("headroom/km 400G", strata_pfc_headroom_per_km_bytes(400), 490e3, 1e3);
  CHECK_NEAR("headroom/km 800G", strata_pfc_headroom_per_km_bytes(800), 980e3, 1e3);
  /* ~2 MB per 400G port (Trident4 64 MB / 32 ports) ⇒ lossless RoCE only to ~4 km */
  double per_port = strata_switch_headroom_per_port_bytes(STRATA_SWITCH_BUFFER_TRIDENT4_BYTES, 32);
  CHECK_NEAR("trident4 per port", per_port, 2e6, 1);
  CHECK_NEAR("lossless km at 400G", strata_roce_max_lossless_km(per_port, 400, 9216), 4.0, 0.1);
  CHECK_NEAR("headroom inverse",
             strata_roce_max_lossless_km(strata_pfc_headroom_bytes(100, 7.5, 4096), 100, 4096), 7.5,
             1e-6);
  CHECK_NEAR("too little headroom", strata_roce_max_lossless_km(1000, 400, 9216), 0, 0);
  /* WireGuard: 80 B over IPv6 ⇒ MTU 1420 (Donenfeld, 2017) */
  CHECK_NEAR("wg mtu", strata_wireguard_mtu(1500), 1420, 0);
  CHECK_NEAR("wg efficiency", strata_wireguard_efficiency(1500), (1420.0 - 52) / (1500 - 52), 1e-9);
  /* PCCL: 1 TCP connection ≈ 3.7 Gb/s, 64 ≈ 45 Gb/s (arXiv 2505.14065) */
  CHECK_NEAR("wan 1 stream", strata_wan_tcp_gbit(100, 1), 3.7, 1e-9);
  CHECK_NEAR("wan 64 streams", strata_wan_tcp_gbit(100, 64), 45, 0.01);
  CHECK_NEAR("wan capped by path", strata_wan_tcp_gbit(10, 64), 10, 0);
  /* technologies */
  CHECK_NEAR("nvlink4 per direction", strata_tech_get(STRATA_TECH_NVLINK4)->peak_gbps, 450, 0);
  CHECK_NEAR("ib ndr port", strata_tech_get(STRATA_TECH_IB_NDR)->peak_gbps, 50, 0);
  CHECK_NEAR("pcie5 as nccl", strata_tech_get(STRATA_TECH_PCIE5)->peak_gbps, 48, 0);
  if (strata_tech_parse("NVLink5") != STRATA_TECH_NVLINK5 || strata_tech_parse("nope") != -1) {
    printf("FAIL tech parse\n");
    failures++;
  }
  if (strata_tech_get(STRATA_TECH_COUNT) != NULL) {
    printf("FAIL tech bounds\n");
    failures++;
  }
  if (failures) return 1;
  printf("ok\n");
  return 0;
}
