// SPDX-License-Identifier: Apache-2.0
/*
 * render.c — a plan as text (for people) and as JSON (for machines; schema in docs/plan-json.md).
 *
 * The JSON schema is a contract: fields are only ever added, never renamed or removed, and
 * "schema" carries the version. The document is built as a jansson tree and written by
 * topo/json.h, which escapes strings and writes a NaN or infinity as null.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"
#include "topo/json.h"

static const char *human_bytes(double bytes, char *buf, size_t len) {
  const char *units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    u++;
  }
  snprintf(buf, len, "%.3g %s", bytes, units[u]);
  return buf;
}

static const char *human_us(double us, char *buf, size_t len) {
  if (us < 1000)
    snprintf(buf, len, "%.3g us", us);
  else if (us < 1e6)
    snprintf(buf, len, "%.3g ms", us / 1e3);
  else
    snprintf(buf, len, "%.3g s", us / 1e6);
  return buf;
}

/* The DiLoCo outer sync section: for the diloco workload, or a training plan that chose DiLoCo. */
static int shows_diloco(const strata_plan *p) {
  return p->diloco.modeled &&
         (p->workload.kind == STRATA_WORKLOAD_DILOCO || strstr(p->decision, "diloco") != NULL);
}

static void text_diloco(FILE *out, const strata_plan *p) {
  const strata_plan_diloco *d = &p->diloco;
  const strata_workload *w = &p->workload;
  char b1[32], b2[32];
  if (!shows_diloco(p)) return;
  fprintf(out,
          "\nDiLoCo outer sync (hierarchical allreduce across %d sites of %d rank%s; f32 outer "
          "gradients sent as %s)\n",
          d->sites, d->ranks_per_site, d->ranks_per_site == 1 ? "" : "s", d->encoding);
  fprintf(out, "  WAN bytes a site sends per fragment exchange: %.0f (%s; %.6g values)\n",
          d->site_bytes_per_fragment, human_bytes(d->site_bytes_per_fragment, b1, sizeof b1),
          d->fragment_values);
  fprintf(out, "  per outer step (%d fragment%s, H=%d): %.0f per site (%s), %.0f per rank\n",
          w->fragments, w->fragments == 1 ? "" : "s", w->inner_steps, d->site_bytes_per_outer,
          human_bytes(d->site_bytes_per_outer, b1, sizeof b1), d->rank_bytes_per_outer);
  fprintf(out, "  per inner step (average): %.0f (%s)\n", d->site_bytes_per_inner,
          human_bytes(d->site_bytes_per_inner, b1, sizeof b1));
  fprintf(out,
          "  synchronous data parallel (f32 gradient allreduce every step): %.0f (%s) per step, "
          "%.4g x DiLoCo's\n",
          d->sync_site_bytes_per_step, human_bytes(d->sync_site_bytes_per_step, b1, sizeof b1),
          d->ratio);
  if (p->wan.link < 0) fprintf(out, "  no link joins some sites: nothing gets across\n");
  fprintf(out, "  one exchange on the WAN (%.4g GB/s, %.4g ms of latency): %s\n", p->wan.gbps,
          d->latency_ms, human_us(d->exchange_ms * 1000, b1, sizeof b1));
  if (w->delay == 0) {
    fprintf(out, "  delay 0: every exchange blocks, %s exposed per outer step\n",
            human_us(d->exposed_ms_per_outer * 1000, b1, sizeof b1));
    return;
  }
  fprintf(out, "  delay %d (%s of compute): %s, %s exposed per outer step\n", w->delay,
          human_us(d->overlap_ms * 1000, b1, sizeof b1), d->hidden ? "hidden" : "not hidden",
          human_us(d->exposed_ms_per_outer * 1000, b2, sizeof b2));
  if (isfinite(d->hide_gbps))
    fprintf(out, "  hiding one exchange behind %d inner step%s needs %.4g GB/s (%.4g Gb/s)\n",
            w->delay, w->delay == 1 ? "" : "s", d->hide_gbps, d->hide_gbps * 8);
  else
    fprintf(out,
            "  the delay's compute is shorter than the latency alone: no bandwidth hides it\n");
}

/* DiLoCo over FSDP2 shards (strata_plan_diloco_sharded): the layout and its exact bytes. */
static void text_diloco_sharded(FILE *out, const strata_plan *p) {
  const strata_plan_diloco_sharded *d = &p->diloco_sharded;
  char b1[32], b2[32];
  if (!d->modeled || p->workload.kind != STRATA_WORKLOAD_DILOCO) return;
  fprintf(out,
          "\nDiLoCo over FSDP2 shards (strata.torch.DiLoCo on fully_shard): %d sites x %d "
          "rank%s, one communicator of %d ranks per shard index\n",
          d->sites, d->ranks_per_site, d->ranks_per_site == 1 ? "" : "s", d->sites);
  fprintf(out, "  %.0f parameter%s%s, %.0f values; dim 0 cut in ceil(rows/%d)-row chunks",
          d->parameters, d->parameters == 1 ? "" : "s",
          d->from_shapes ? " (--param-shapes)" : " (flat fragments)", d->model_values,
          d->ranks_per_site);
  if (d->uneven)
    fprintf(out, "; %d uneven (e.g. %llu rows x %llu: the last holding rank gets fewer rows)\n",
            d->uneven, (unsigned long long)d->uneven_rows,
            (unsigned long long)d->uneven_row_values);
  else
    fprintf(out, "; every split even\n");
  fprintf(out, "  WAN bytes per outer step: %.0f per site (%s)", d->site_bytes_per_outer,
          human_bytes(d->site_bytes_per_outer, b1, sizeof b1));
  if (d->site_bytes_max != d->site_bytes_min)
    fprintf(out, "; %.0f to %.0f over the sites", d->site_bytes_min, d->site_bytes_max);
  fprintf(out, ", %.0f messages; %s chunks\n", d->messages_per_outer,
          human_bytes((double)d->chunk_bytes, b2, sizeof b2));
  fprintf(out, "  %-11s %14s %16s %9s %14s\n", "rank", "shard values", "WAN bytes/outer",
          "messages", "block headers");
  for (int i = 0; i < d->group_count; i++) {
    const strata_plan_diloco_rank_group *g = &d->group[i];
    char ranks[24];
    if (g->first == g->last)
      snprintf(ranks, sizeof ranks, "%d", g->first);
    else
      snprintf(ranks, sizeof ranks, "%d-%d", g->first, g->last);
    fprintf(out, "  %-11s %14.0f %16.0f %9.0f %14.0f\n", ranks, g->values, g->wan_bytes,
            g->messages, g->header_bytes);
  }
  if (d->groups_truncated) fprintf(out, "  (more ranks of other figures not listed)\n");
  fprintf(out,
          "  outer exchanges on the WAN (every rank of a site at once, %.4g ms of latency each): "
          "%s per outer step, %s exposed\n",
          d->latency_ms, human_us(d->exchange_ms_per_outer * 1000, b1, sizeof b1),
          human_us(d->exposed_ms_per_outer * 1000, b2, sizeof b2));
  if (d->codec_encode_gbps > 0)
    fprintf(out,
            "  of which the codec on each rank's progress thread: %s per outer step (encode %.2f "
            "GB/s, decode %.2f GB/s of f32; --rank-cores scales them)\n",
            human_us(d->codec_ms_per_outer * 1000, b1, sizeof b1), d->codec_encode_gbps,
            d->codec_decode_gbps);
}

/* Where the measured figures came from, and every link as the plan sees it (only with a matrix). */
static void text_measured_links(FILE *out, const strata_plan *p) {
  const strata_plan_measured *ms = p->measured;
  const strata_topo *t = p->topo;
  if (!ms) return;
  fprintf(out, "\nlinks (measured: %s, %d rank%s in %d site%s by %s; mapped by %s", ms->source,
          ms->ranks, ms->ranks == 1 ? "" : "s", ms->matrix_sites, ms->matrix_sites == 1 ? "" : "s",
          ms->from_labels ? "site labels" : "latency clustering", ms->by_order ? "order" : "name");
  if (ms->when[0]) fprintf(out, "; %s", ms->when);
  fprintf(out, ")\n");
  if (ms->by_order) {
    fprintf(out, "  the matrix's site names are not the topology's: mapped by order,");
    for (int s = 0; s < ms->matrix_sites; s++)
      fprintf(out, "%s %s -> %s", s ? "," : "", ms->site_name[s], t->sites[ms->topo_site[s]].name);
    fprintf(out, "\n");
  }
  if (ms->streams > 0)
    fprintf(
        out,
        "  bandwidth is what one rank pair got with %d stream%s (--streams does not scale it)\n",
        ms->streams, ms->streams == 1 ? "" : "s");
  else
    fprintf(out,
            "  bandwidth is what one rank pair got (streams not recorded; --streams does not "
            "scale it)\n");
  if (ms->inside_sites && ms->inside_pairs > 0)
    fprintf(out, "  inside a site: one-way %.4g us, %.4g GB/s (median of %d pairs)\n",
            ms->inside_latency_us, ms->inside_gbps, ms->inside_pairs);
  for (int i = 0; i < t->link_count; i++) {
    strata_wan_model m;
    strata_plan_link_model(p, i, &m);
    const strata_plan_measured_link *ml = strata_plan_measured_find(ms, i);
    char pairs[48] = "modeled (no matrix ranks at both ends)";
    if (ml) snprintf(pairs, sizeof pairs, "measured, median of %d pairs", ml->pairs);
    fprintf(out, "  %-16s %s -- %s: RTT %.4g ms (one-way %.6g us), %.4g GB/s (%.4g Gb/s)  %s\n",
            t->links[i].name, t->sites[t->links[i].site_a].name, t->sites[t->links[i].site_b].name,
            m.rtt_ms, m.rtt_ms * 500, m.gbps, m.gbps * 8, pairs);
  }
}

/* The fsdp recipe: degrees, per-step communication of each kind, memory per GPU. */
static void text_fsdp(FILE *out, const strata_plan *p) {
  const strata_plan_fsdp *d = &p->fsdp;
  char b1[32], b2[32], b3[32], b4[32];
  if (!d->modeled) return;
  fprintf(out,
          "\nFSDP (sharded data parallel): tp %d x pp %d x dp %d, %d layers, hidden %.0f, %d "
          "micro-batch%s\n",
          d->tp, d->pp, d->dp, d->layers, d->hidden, d->micro_batches,
          d->micro_batches == 1 ? "" : "es");
  if (d->note[0]) fprintf(out, "  note: %s\n", d->note);
  fprintf(out,
          "  FSDP per layer: allgather %s %s, reduce-scatter %s over %d dp ranks (%d per NVLink "
          "domain, %s)\n",
          human_bytes(d->layer_bytes, b1, sizeof b1),
          human_us(d->allgather_ms * 1000, b2, sizeof b2),
          human_us(d->reduce_scatter_ms * 1000, b3, sizeof b3), d->dp, d->dp_ranks_per_domain,
          d->allgather_algo);
  fprintf(out, "  FSDP per step: %s (2 allgathers + 1 reduce-scatter per layer), %s exposed\n",
          human_us(d->fsdp_ms * 1000, b1, sizeof b1),
          human_us(d->fsdp_exposed_ms * 1000, b2, sizeof b2));
  if (d->tp > 1)
    fprintf(out, "  TP allreduce of %s: %s each, 4 per layer per micro-batch: %s per step\n",
            human_bytes(d->tp_bytes, b1, sizeof b1),
            human_us(d->tp_allreduce_ms * 1000, b2, sizeof b2),
            human_us(d->tp_ms * 1000, b3, sizeof b3));
  if (d->pp > 1)
    fprintf(out, "  PP send/recv of %s: %s each, %s exposed per step; bubble %s\n",
            human_bytes(d->pp_bytes, b1, sizeof b1), human_us(d->pp_p2p_ms * 1000, b2, sizeof b2),
            human_us(d->pp_ms * 1000, b3, sizeof b3), human_us(d->bubble_ms * 1000, b4, sizeof b4));
  fprintf(out,
          "  memory per GPU: %.1f GB = weights %.2f + gradients %.2f + Adam states %.2f + 2 "
          "gathered layers %.2f + activations %.1f%s\n",
          d->memory_gb, d->weights_gb, d->grads_gb, d->optimizer_gb, d->gathered_gb,
          d->activations_gb,
          d->gpu_memory_gb <= 0 ? " (GPU memory not given)"
          : d->fits             ? ""
                                : " - MORE THAN THE GPU HOLDS");
}

void strata_plan_write_text(FILE *out, const strata_plan *p) {
  const strata_topo *t = p->topo;
  const strata_workload *w = &p->workload;
  char b1[32], b2[32];
  fprintf(out, "strata plan: %s (%s)\n", t->name[0] ? t->name : "unnamed", t->source);
  if (t->description[0]) fprintf(out, "  %s\n", t->description);
  fprintf(out, "  %d site%s, %lld node%s, %lld GPU%s\n", p->sites, p->sites == 1 ? "" : "s",
          (long long)p->nodes, p->nodes == 1 ? "" : "s", (long long)p->gpus,
          p->gpus == 1 ? "" : "s");
  fprintf(out, "\nworkload: %s - %.3g B parameters (%s), %.0f ms compute per step",
          strata_workload_kind_name(w->kind), w->params / 1e9, strata_dtype_name(w->dtype),
          w->step_ms);
  if (w->kind == STRATA_WORKLOAD_DILOCO)
    fprintf(out, ", H=%d, %g-bit outer sync, %d fragment%s, delay %d", w->inner_steps, w->wire_bits,
            w->fragments, w->fragments == 1 ? "" : "s", w->delay);
  if (w->transport != STRATA_WAN_STRATA)
    fprintf(out, ", across sites on %s", strata_wan_transport_name(w->transport));
  fprintf(out, "\n");
  text_measured_links(out, p);
  fprintf(out, "\nlayers (what each one carries)\n");
  for (int i = 0; i < p->role_count; i++)
    fprintf(out, "  %-3s %s\n      carries: %s\n", p->roles[i].layer, p->roles[i].technology,
            p->roles[i].carries);
  if (p->prediction_count > 0) {
    fprintf(out, "\npredictions (alpha-beta model; busbw as nccl-tests; * = fastest, chosen)\n");
    fprintf(out, "  %-7s %-15s %10s  %-20s %10s %12s\n", "scope", "collective", "size", "algorithm",
            "time", "busbw GB/s");
    for (int i = 0; i < p->prediction_count; i++) {
      const strata_prediction *pr = &p->predictions[i];
      char algo[40];
      snprintf(algo, sizeof algo, "%s%s%s%s", strata_model_algo_name(pr->algo),
               pr->proto >= 0 ? "/" : "",
               pr->proto >= 0 ? strata_nccl_proto_name((strata_nccl_proto)pr->proto) : "",
               p->prediction_chosen[i] ? " *" : "");
      fprintf(out, "  %-7s %-15s %10s  %-20s %10s %12.1f\n", p->prediction_scope[i],
              strata_coll_name(pr->coll), human_bytes(pr->bytes, b1, sizeof b1), algo,
              human_us(pr->time_us, b2, sizeof b2), pr->busbw_gbps);
    }
  }
  fprintf(out, "\ndecision: %s\n  %s\n", p->decision, p->decision_reason);
  if (p->option_count > 0) {
    fprintf(out, "\n  %-19s %-9s %13s %6s %14s\n", "option", "possible", "comm ms/step", "util",
            "WAN/site/step");
    for (int i = 0; i < p->option_count; i++) {
      const strata_plan_option *o = &p->options[i];
      fprintf(out, "  %-19s %-9s %13.3g %5.0f%% %14s\n      %s\n", o->name,
              o->available ? "yes" : "no", o->comm_ms_per_step, 100 * o->utilization,
              human_bytes(o->wan_bytes_per_step, b1, sizeof b1), o->note);
    }
  }
  text_diloco(out, p);
  text_diloco_sharded(out, p);
  text_fsdp(out, p);
  strata_plan_write_startup_text(out, p);
  if (p->summary[0]) fprintf(out, "\n%s\n", p->summary);
  if (p->check_count > 0) {
    fprintf(out, "\nbring-up checks (expected figures from the model)\n");
    for (int i = 0; i < p->check_count; i++) fprintf(out, "  [ ] %s\n", p->checks[i]);
  }
  fprintf(out, "\nfindings: %d\n", p->finding_count);
  for (int i = 0; i < p->finding_count; i++) {
    const strata_finding *f = &p->findings[i];
    fprintf(out, "  %-7s %s (layer %d)%s%s\n    %s\n    fix: %s\n",
            strata_severity_name(f->severity), f->id, f->layer, f->where[0] ? " at " : "", f->where,
            f->message, f->fix);
  }
}

/* ---- JSON ---- */

/* Numbers: whole ones (bytes, counts) exactly, others to 6 significant digits, NaN/inf as null
 * (strata_json_number; the digits are set where the document is written). */
#define PLAN_JSON_REAL_DIGITS 6

static json_t *num(double v) {
  return strata_json_number(v);
}
static json_t *str(const char *s) {
  return strata_json_string(s);
}

static json_t *json_topology(const strata_plan *p) {
  return json_pack("{s:o, s:o, s:i, s:I, s:I}", "name", str(p->topo->name), "source",
                   str(p->topo->source), "sites", p->sites, "nodes", (json_int_t)p->nodes, "gpus",
                   (json_int_t)p->gpus);
}

static json_t *json_workload(const strata_workload *w) {
  json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:i, s:o, s:i, s:i, s:i, s:o, s:i, s:o, s:i, s:b}",
                        "kind", str(strata_workload_kind_name(w->kind)), "params", num(w->params),
                        "dtype", str(strata_dtype_name(w->dtype)), "step_ms", num(w->step_ms),
                        "inner_steps", w->inner_steps, "wire_bits", num(w->wire_bits), "fragments",
                        w->fragments, "delay", w->delay, "wan_streams", w->wan_streams,
                        "update_fraction", num(w->update_fraction), "sync_every", w->sync_every,
                        "kv_bytes_per_request", num(w->kv_bytes_per_request), "replicas_per_site",
                        w->replicas_per_site, "cross_site_pipeline", w->cross_site_pipeline != 0);
  if (o) json_object_set_new(o, "transport", str(strata_wan_transport_name(w->transport)));
  return o;
}

static json_t *json_predictions(const strata_plan *p) {
  json_t *list = json_array();
  for (int i = 0; i < p->prediction_count; i++) {
    const strata_prediction *pr = &p->predictions[i];
    list = strata_json_append(
        list,
        json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o}", "scope",
                  str(p->prediction_scope[i]), "collective", str(strata_coll_name(pr->coll)),
                  "bytes", num(pr->bytes), "algorithm", str(strata_model_algo_name(pr->algo)),
                  "time_us", num(pr->time_us), "algbw_gbps", num(pr->algbw_gbps), "busbw_gbps",
                  num(pr->busbw_gbps), "chosen", p->prediction_chosen[i] != 0, "protocol",
                  pr->proto >= 0 ? str(strata_nccl_proto_name((strata_nccl_proto)pr->proto))
                                 : json_null()));
  }
  return list;
}

static json_t *json_decision(const strata_plan *p) {
  json_t *options = json_array();
  for (int i = 0; i < p->option_count; i++) {
    const strata_plan_option *o = &p->options[i];
    options = strata_json_append(
        options,
        json_pack("{s:o, s:b, s:o, s:o, s:o, s:o, s:o}", "name", str(o->name), "available",
                  o->available != 0, "ruled_out_by",
                  o->ruled_out_by[0] ? str(o->ruled_out_by) : json_null(), "comm_ms_per_step",
                  num(o->comm_ms_per_step), "utilization", num(o->utilization),
                  "wan_bytes_per_step", num(o->wan_bytes_per_step), "note", str(o->note)));
  }
  return json_pack("{s:o, s:o, s:o, s:o, s:o}", "choice", str(p->decision), "reason",
                   str(p->decision_reason), "comm_ms_per_step", num(p->comm_ms_per_step),
                   "utilization", num(p->utilization), "options", options);
}

static json_t *json_layers(const strata_plan *p) {
  json_t *list = json_array();
  for (int i = 0; i < p->role_count; i++)
    list = strata_json_append(
        list, json_pack("{s:o, s:o, s:o}", "layer", str(p->roles[i].layer), "technology",
                        str(p->roles[i].technology), "carries", str(p->roles[i].carries)));
  return list;
}

/* links[]: every topology link as the plan sees it, "source" measured or modeled. */
static json_t *json_links(const strata_plan *p) {
  const strata_topo *t = p->topo;
  json_t *list = json_array();
  for (int i = 0; i < t->link_count; i++) {
    strata_wan_model m;
    strata_plan_link_model(p, i, &m);
    const strata_plan_measured_link *ml = strata_plan_measured_find(p->measured, i);
    list = strata_json_append(
        list,
        json_pack("{s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:i, s:o}", "name",
                  str(t->links[i].name), "site_a", str(t->sites[t->links[i].site_a].name), "site_b",
                  str(t->sites[t->links[i].site_b].name), "source",
                  m.measured ? "measured" : "modeled", "rtt_ms", num(m.rtt_ms), "latency_us",
                  num(ml ? ml->latency_us : m.rtt_ms * 500), "bandwidth_gbps", num(m.gbps), "km",
                  num(m.km >= 0 ? m.km : NAN), "pairs", ml ? ml->pairs : 0, "extension_ruled_out",
                  m.extension_ruled_out ? str(m.extension_ruled_out) : json_null()));
  }
  return list;
}

/* link_matrix: null, or where the measured figures came from and how sites were mapped. */
static json_t *json_link_matrix(const strata_plan *p) {
  const strata_plan_measured *ms = p->measured;
  if (!ms) return json_null();
  json_t *sites = json_array();
  for (int s = 0; s < ms->matrix_sites; s++)
    sites = strata_json_append(sites, json_pack("{s:o, s:i, s:o}", "name", str(ms->site_name[s]),
                                                "ranks", ms->site_ranks[s], "topology_site",
                                                str(p->topo->sites[ms->topo_site[s]].name)));
  int inside = ms->inside_pairs > 0;
  json_t *inside_sites =
      json_pack("{s:b, s:i, s:o, s:o}", "applied", ms->inside_sites && inside, "pairs",
                ms->inside_pairs, "latency_us", num(inside ? ms->inside_latency_us : NAN),
                "bandwidth_gbps", num(inside ? ms->inside_gbps : NAN));
  return json_pack("{s:o, s:o, s:o, s:i, s:o, s:s, s:s, s:o, s:o}", "source", str(ms->source),
                   "measured", str(ms->when), "method", str(ms->method), "ranks", ms->ranks,
                   "streams", num(ms->streams > 0 ? ms->streams : NAN), "grouping",
                   ms->from_labels ? "labels" : "latency", "mapping",
                   ms->by_order ? "order" : "name", "sites", sites, "inside_sites", inside_sites);
}

/* diloco.sharded: null, or the layout over FSDP2 shards (strata_plan_diloco_sharded). */
static json_t *json_diloco_sharded(const strata_plan *p) {
  const strata_plan_diloco_sharded *d = &p->diloco_sharded;
  if (!d->modeled || p->workload.kind != STRATA_WORKLOAD_DILOCO) return json_null();
  json_t *ranks = json_array();
  for (int i = 0; ranks && i < d->group_count; i++) {
    const strata_plan_diloco_rank_group *g = &d->group[i];
    json_array_append_new(
        ranks, json_pack("{s:i, s:i, s:o, s:o, s:o, s:o}", "first", g->first, "last", g->last,
                         "values", num(g->values), "wan_bytes_per_outer_step", num(g->wan_bytes),
                         "messages_per_outer_step", num(g->messages), "header_bytes_per_outer_step",
                         num(g->header_bytes)));
  }
  json_t *o = json_pack(
      "{s:i, s:i, s:b, s:o, s:o, s:i, s:o, s:o, s:o, s:o, s:o}", "sites", d->sites,
      "ranks_per_site", d->ranks_per_site, "from_shapes", d->from_shapes != 0, "parameters",
      num(d->parameters), "values", num(d->model_values), "uneven_parameters", d->uneven,
      "chunk_bytes", num((double)d->chunk_bytes), "wan_bytes_per_outer_step",
      num(d->site_bytes_per_outer), "wan_bytes_per_outer_step_min", num(d->site_bytes_min),
      "wan_bytes_per_outer_step_max", num(d->site_bytes_max), "messages_per_outer_step",
      num(d->messages_per_outer));
  json_t *t = json_pack(
      "{s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o}", "exchange_latency_ms", num(d->latency_ms),
      "exchange_ms_per_outer_step", num(d->exchange_ms_per_outer), "exposed_ms_per_outer_step",
      num(d->exposed_ms_per_outer), "codec_ms_per_outer_step", num(d->codec_ms_per_outer),
      "codec_encode_gbps", num(d->codec_encode_gbps), "codec_decode_gbps",
      num(d->codec_decode_gbps), "ranks_truncated", d->groups_truncated != 0, "ranks", ranks);
  if (!o || !t || json_object_update(o, t) != 0) {
    json_decref(o);
    json_decref(t);
    return NULL;
  }
  json_decref(t);
  return o;
}

/* diloco: null, or the outer sync's bytes and time (shows_diloco). */
static json_t *json_diloco(const strata_plan *p) {
  const strata_plan_diloco *d = &p->diloco;
  if (!shows_diloco(p)) return json_null();
  json_t *o = json_pack(
      "{s:o, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "encoding", str(d->encoding), "sites",
      d->sites, "ranks_per_site", d->ranks_per_site, "fragment_values", num(d->fragment_values),
      "wan_bytes_per_fragment", num(d->site_bytes_per_fragment), "wan_bytes_per_outer_step",
      num(d->site_bytes_per_outer), "wan_bytes_per_outer_step_per_rank",
      num(d->rank_bytes_per_outer), "wan_bytes_per_inner_step", num(d->site_bytes_per_inner),
      "sync_wan_bytes_per_step", num(d->sync_site_bytes_per_step), "sync_ratio", num(d->ratio));
  json_t *t = json_pack("{s:o, s:o, s:o, s:o, s:b, s:o, s:o}", "sharded", json_diloco_sharded(p),
                        "exchange_ms", num(d->exchange_ms), "exchange_latency_ms",
                        num(d->latency_ms), "overlap_ms", num(d->overlap_ms), "hidden",
                        d->hidden != 0, "exposed_ms_per_outer_step", num(d->exposed_ms_per_outer),
                        "hide_gbps", num(d->hide_gbps));
  if (!o || !t || json_object_update(o, t) != 0) {
    json_decref(o);
    json_decref(t);
    return NULL;
  }
  json_decref(t);
  return o;
}

/* fsdp: null, or the recipe's figures (strata_plan_fsdp). */
static json_t *json_fsdp(const strata_plan *p) {
  const strata_plan_fsdp *d = &p->fsdp;
  if (!d->modeled) return json_null();
  json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:o, s:i, s:o, s:o, s:o, s:o, s:o, s:o}", "tp",
                        d->tp, "pp", d->pp, "dp", d->dp, "layers", d->layers, "micro_batches",
                        d->micro_batches, "hidden", num(d->hidden), "dp_ranks_per_domain",
                        d->dp_ranks_per_domain, "layer_bytes", num(d->layer_bytes), "allgather_ms",
                        num(d->allgather_ms), "reduce_scatter_ms", num(d->reduce_scatter_ms),
                        "allgather_algorithm", str(d->allgather_algo), "fsdp_ms_per_step",
                        num(d->fsdp_ms), "fsdp_exposed_ms", num(d->fsdp_exposed_ms));
  json_t *t = json_pack(
      "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o}",
      "tp_allreduce_bytes", num(d->tp_bytes), "tp_allreduce_ms", num(d->tp_allreduce_ms),
      "tp_ms_per_step", num(d->tp_ms), "pp_bytes", num(d->pp_bytes), "pp_p2p_ms", num(d->pp_p2p_ms),
      "pp_ms_per_step", num(d->pp_ms), "bubble_ms", num(d->bubble_ms), "comm_ms_per_step",
      num(d->comm_ms), "step_ms", num(d->step_total_ms), "weights_gb", num(d->weights_gb),
      "gradients_gb", num(d->grads_gb), "optimizer_gb", num(d->optimizer_gb), "gathered_gb",
      num(d->gathered_gb), "activations_gb", num(d->activations_gb), "memory_gb", num(d->memory_gb),
      "gpu_memory_gb", num(d->gpu_memory_gb), "fits", d->fits != 0, "note", str(d->note));
  if (!o || !t || json_object_update(o, t) != 0) {
    json_decref(o);
    json_decref(t);
    return NULL;
  }
  json_decref(t);
  return o;
}

static json_t *json_checks(const strata_plan *p) {
  json_t *list = json_array();
  for (int i = 0; i < p->check_count; i++) list = strata_json_append(list, str(p->checks[i]));
  return list;
}

static json_t *json_findings(const strata_plan *p) {
  json_t *list = json_array();
  for (int i = 0; i < p->finding_count; i++) {
    const strata_finding *f = &p->findings[i];
    list = strata_json_append(
        list, json_pack("{s:o, s:o, s:i, s:o, s:o, s:o}", "id", str(f->id), "severity",
                        str(strata_severity_name(f->severity)), "layer", f->layer, "where",
                        str(f->where), "message", str(f->message), "fix", str(f->fix)));
  }
  return list;
}

void strata_plan_write_json(FILE *out, const strata_plan *p) {
  json_t *doc =
      json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "schema",
                "strata-plan/1", "topology", json_topology(p), "workload",
                json_workload(&p->workload), "links", json_links(p), "link_matrix",
                json_link_matrix(p), "layers", json_layers(p), "predictions", json_predictions(p),
                "decision", json_decision(p), "diloco", json_diloco(p), "fsdp", json_fsdp(p),
                "summary", str(p->summary), "checks", json_checks(p), "findings", json_findings(p));
  doc = strata_json_set(doc, "startup", strata_plan_startup_json(p));
  if (strata_json_write(out, doc, PLAN_JSON_REAL_DIGITS) != 0)
    fprintf(stderr, "strata plan: writing the plan as JSON failed\n");
}
