/*
 * render.c — a plan as text (for people) and as JSON (for machines; schema in docs/plan-json.md).
 *
 * The JSON schema is a contract: fields are only ever added, never renamed or removed, and
 * "schema" carries the version. Strings are escaped here; numbers are finite (a NaN or infinity
 * is written as null).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "plan/plan.h"

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
    fprintf(out, ", H=%d, %g-bit outer sync, %d fragment%s", w->inner_steps, w->wire_bits,
            w->fragments, w->fragments == 1 ? "" : "s");
  fprintf(out, "\n");
  text_measured_links(out, p);
  fprintf(out, "\nlayers (what each one carries)\n");
  for (int i = 0; i < p->role_count; i++)
    fprintf(out, "  %-3s %s\n      carries: %s\n", p->roles[i].layer, p->roles[i].technology,
            p->roles[i].carries);
  if (p->prediction_count > 0) {
    fprintf(out, "\npredictions (alpha-beta model; busbw as nccl-tests; * = fastest, chosen)\n");
    fprintf(out, "  %-7s %-15s %10s  %-14s %10s %12s\n", "scope", "collective", "size", "algorithm",
            "time", "busbw GB/s");
    for (int i = 0; i < p->prediction_count; i++) {
      const strata_prediction *pr = &p->predictions[i];
      char algo[24];
      snprintf(algo, sizeof algo, "%s%s", strata_model_algo_name(pr->algo),
               p->prediction_chosen[i] ? " *" : "");
      fprintf(out, "  %-7s %-15s %10s  %-14s %10s %12.1f\n", p->prediction_scope[i],
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

/* Whole numbers (bytes, counts) exactly; others to 6 significant digits; NaN/inf as null. */
static void json_number(FILE *out, double v) {
  if (!isfinite(v))
    fputs("null", out);
  else if (v == floor(v) && fabs(v) < 1e15)
    fprintf(out, "%.0f", v);
  else
    fprintf(out, "%.6g", v);
}

static void json_key(FILE *out, const char *indent, const char *key) {
  fprintf(out, "%s\"%s\": ", indent, key);
}

static void json_workload(FILE *out, const strata_workload *w) {
  fprintf(out, "  \"workload\": {\"kind\": ");
  strata_write_quoted(out, strata_workload_kind_name(w->kind));
  fprintf(out, ", \"params\": ");
  json_number(out, w->params);
  fprintf(out, ", \"dtype\": ");
  strata_write_quoted(out, strata_dtype_name(w->dtype));
  fprintf(out, ", \"step_ms\": ");
  json_number(out, w->step_ms);
  fprintf(out, ", \"inner_steps\": %d, \"wire_bits\": ", w->inner_steps);
  json_number(out, w->wire_bits);
  fprintf(out, ", \"fragments\": %d, \"wan_streams\": %d, \"update_fraction\": ", w->fragments,
          w->wan_streams);
  json_number(out, w->update_fraction);
  fprintf(out, ", \"sync_every\": %d, \"kv_bytes_per_request\": ", w->sync_every);
  json_number(out, w->kv_bytes_per_request);
  fprintf(out, ", \"replicas_per_site\": %d, \"cross_site_pipeline\": %s},\n", w->replicas_per_site,
          w->cross_site_pipeline ? "true" : "false");
}

static void json_predictions(FILE *out, const strata_plan *p) {
  fprintf(out, "  \"predictions\": [");
  for (int i = 0; i < p->prediction_count; i++) {
    const strata_prediction *pr = &p->predictions[i];
    fprintf(out, "%s\n    {\"scope\": ", i ? "," : "");
    strata_write_quoted(out, p->prediction_scope[i]);
    fprintf(out, ", \"collective\": ");
    strata_write_quoted(out, strata_coll_name(pr->coll));
    fprintf(out, ", \"bytes\": ");
    json_number(out, pr->bytes);
    fprintf(out, ", \"algorithm\": ");
    strata_write_quoted(out, strata_model_algo_name(pr->algo));
    fprintf(out, ", \"time_us\": ");
    json_number(out, pr->time_us);
    fprintf(out, ", \"algbw_gbps\": ");
    json_number(out, pr->algbw_gbps);
    fprintf(out, ", \"busbw_gbps\": ");
    json_number(out, pr->busbw_gbps);
    fprintf(out, ", \"chosen\": %s}", p->prediction_chosen[i] ? "true" : "false");
  }
  fprintf(out, "%s],\n", p->prediction_count ? "\n  " : "");
}

static void json_decision(FILE *out, const strata_plan *p) {
  fprintf(out, "  \"decision\": {\"choice\": ");
  strata_write_quoted(out, p->decision);
  fprintf(out, ", \"reason\": ");
  strata_write_quoted(out, p->decision_reason);
  fprintf(out, ", \"comm_ms_per_step\": ");
  json_number(out, p->comm_ms_per_step);
  fprintf(out, ", \"utilization\": ");
  json_number(out, p->utilization);
  fprintf(out, ",\n    \"options\": [");
  for (int i = 0; i < p->option_count; i++) {
    const strata_plan_option *o = &p->options[i];
    fprintf(out, "%s\n      {\"name\": ", i ? "," : "");
    strata_write_quoted(out, o->name);
    fprintf(out, ", \"available\": %s, \"comm_ms_per_step\": ", o->available ? "true" : "false");
    json_number(out, o->comm_ms_per_step);
    fprintf(out, ", \"utilization\": ");
    json_number(out, o->utilization);
    fprintf(out, ", \"wan_bytes_per_step\": ");
    json_number(out, o->wan_bytes_per_step);
    fprintf(out, ", \"note\": ");
    strata_write_quoted(out, o->note);
    fputc('}', out);
  }
  fprintf(out, "%s]},\n", p->option_count ? "\n    " : "");
}

static void json_layers(FILE *out, const strata_plan *p) {
  fprintf(out, "  \"layers\": [");
  for (int i = 0; i < p->role_count; i++) {
    fprintf(out, "%s\n    {\"layer\": ", i ? "," : "");
    strata_write_quoted(out, p->roles[i].layer);
    fprintf(out, ", \"technology\": ");
    strata_write_quoted(out, p->roles[i].technology);
    fprintf(out, ", \"carries\": ");
    strata_write_quoted(out, p->roles[i].carries);
    fputc('}', out);
  }
  fprintf(out, "%s],\n", p->role_count ? "\n  " : "");
}

/* links[]: every topology link as the plan sees it, "source" measured or modeled. */
static void json_links(FILE *out, const strata_plan *p) {
  const strata_topo *t = p->topo;
  fprintf(out, "  \"links\": [");
  for (int i = 0; i < t->link_count; i++) {
    strata_wan_model m;
    strata_plan_link_model(p, i, &m);
    const strata_plan_measured_link *ml = strata_plan_measured_find(p->measured, i);
    fprintf(out, "%s\n    {\"name\": ", i ? "," : "");
    strata_write_quoted(out, t->links[i].name);
    fprintf(out, ", \"site_a\": ");
    strata_write_quoted(out, t->sites[t->links[i].site_a].name);
    fprintf(out, ", \"site_b\": ");
    strata_write_quoted(out, t->sites[t->links[i].site_b].name);
    fprintf(out, ", \"source\": \"%s\", \"rtt_ms\": ", m.measured ? "measured" : "modeled");
    json_number(out, m.rtt_ms);
    fprintf(out, ", \"latency_us\": ");
    json_number(out, ml ? ml->latency_us : m.rtt_ms * 500);
    fprintf(out, ", \"bandwidth_gbps\": ");
    json_number(out, m.gbps);
    fprintf(out, ", \"km\": ");
    json_number(out, m.km >= 0 ? m.km : NAN);
    fprintf(out, ", \"pairs\": %d}", ml ? ml->pairs : 0);
  }
  fprintf(out, "%s],\n", t->link_count ? "\n  " : "");
}

/* link_matrix: null, or where the measured figures came from and how sites were mapped. */
static void json_link_matrix(FILE *out, const strata_plan *p) {
  const strata_plan_measured *ms = p->measured;
  fprintf(out, "  \"link_matrix\": ");
  if (!ms) {
    fprintf(out, "null,\n");
    return;
  }
  fprintf(out, "{\"source\": ");
  strata_write_quoted(out, ms->source);
  fprintf(out, ", \"measured\": ");
  strata_write_quoted(out, ms->when);
  fprintf(out, ", \"method\": ");
  strata_write_quoted(out, ms->method);
  fprintf(out, ", \"ranks\": %d, \"streams\": ", ms->ranks);
  json_number(out, ms->streams > 0 ? ms->streams : NAN);
  fprintf(out, ", \"grouping\": \"%s\", \"mapping\": \"%s\",\n    \"sites\": [",
          ms->from_labels ? "labels" : "latency", ms->by_order ? "order" : "name");
  for (int s = 0; s < ms->matrix_sites; s++) {
    fprintf(out, "%s{\"name\": ", s ? ", " : "");
    strata_write_quoted(out, ms->site_name[s]);
    fprintf(out, ", \"ranks\": %d, \"topology_site\": ", ms->site_ranks[s]);
    strata_write_quoted(out, p->topo->sites[ms->topo_site[s]].name);
    fputc('}', out);
  }
  fprintf(out, "],\n    \"inside_sites\": {\"applied\": %s, \"pairs\": %d, \"latency_us\": ",
          ms->inside_sites && ms->inside_pairs > 0 ? "true" : "false", ms->inside_pairs);
  json_number(out, ms->inside_pairs > 0 ? ms->inside_latency_us : NAN);
  fprintf(out, ", \"bandwidth_gbps\": ");
  json_number(out, ms->inside_pairs > 0 ? ms->inside_gbps : NAN);
  fprintf(out, "}},\n");
}

static void json_findings(FILE *out, const strata_plan *p) {
  fprintf(out, "  \"findings\": [");
  for (int i = 0; i < p->finding_count; i++) {
    const strata_finding *f = &p->findings[i];
    fprintf(out, "%s\n    {\"id\": ", i ? "," : "");
    strata_write_quoted(out, f->id);
    fprintf(out, ", \"severity\": ");
    strata_write_quoted(out, strata_severity_name(f->severity));
    fprintf(out, ", \"layer\": %d, \"where\": ", f->layer);
    strata_write_quoted(out, f->where);
    fprintf(out, ", \"message\": ");
    strata_write_quoted(out, f->message);
    fprintf(out, ", \"fix\": ");
    strata_write_quoted(out, f->fix);
    fputc('}', out);
  }
  fprintf(out, "%s]\n", p->finding_count ? "\n  " : "");
}

void strata_plan_write_json(FILE *out, const strata_plan *p) {
  const strata_topo *t = p->topo;
  fprintf(out, "{\n  \"schema\": \"strata-plan/1\",\n");
  fprintf(out, "  \"topology\": {\"name\": ");
  strata_write_quoted(out, t->name);
  fprintf(out, ", \"source\": ");
  strata_write_quoted(out, t->source);
  fprintf(out, ", \"sites\": %d, \"nodes\": %lld, \"gpus\": %lld},\n", p->sites,
          (long long)p->nodes, (long long)p->gpus);
  json_workload(out, &p->workload);
  json_links(out, p);
  json_link_matrix(out, p);
  json_layers(out, p);
  json_predictions(out, p);
  json_decision(out, p);
  json_key(out, "  ", "summary");
  strata_write_quoted(out, p->summary);
  fprintf(out, ",\n  \"checks\": [");
  for (int i = 0; i < p->check_count; i++) {
    fprintf(out, "%s", i ? ", " : "");
    strata_write_quoted(out, p->checks[i]);
  }
  fprintf(out, "],\n");
  json_findings(out, p);
  fprintf(out, "}\n");
}
