// SPDX-License-Identifier: Apache-2.0
/*
 * svg.c — the map as a picture: sites as boxes in a grid, each with its cluster fabric (layer 2,
 * blue) and its node groups drawn as one node glyph (GPUs joined by layer 1, green) times a count;
 * links between sites coloured by their layer-3 kind (3a routed path grey, 3b fabric extension
 * orange, 3c overlay purple dashed) and labelled with bandwidth, distance and RTT; a legend, the
 * decision and the findings underneath.
 *
 * The picture is drawn from the topology and the plan only (never per GPU), so it is the same
 * size for 8 GPUs and 100,000. Every string is XML-escaped.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/physics.h"
#include "plan/plan.h"

#define COLOR_L1 "#2e9e44"
#define COLOR_L2 "#2f6fb5"
#define COLOR_L3A "#6b6b6b"
#define COLOR_L3B "#e07b16"
#define COLOR_L3C "#8e44ad"
#define COLOR_ERROR "#c0392b"
#define COLOR_WARNING "#d68910"

#define SITE_W 500
#define GAP_X 270
#define GAP_Y 200
#define MARGIN 40
#define TOP 90
#define GROUP_ROW_H 64
#define MAX_GROUP_ROWS 4

static void xml_text(FILE *out, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '&':
        fputs("&amp;", out);
        break;
      case '<':
        fputs("&lt;", out);
        break;
      case '>':
        fputs("&gt;", out);
        break;
      case '"':
        fputs("&quot;", out);
        break;
      default:
        fputc(*s, out);
    }
  }
}

static void text_at(FILE *out, double x, double y, const char *attrs, const char *s) {
  fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" %s>", x, y, attrs);
  xml_text(out, s);
  fputs("</text>\n", out);
}

typedef struct layout {
  int cols, rows;
  double site_h;
  double width, height;
} layout;

static int shown_groups(const strata_topo_site *s) {
  return s->group_count < MAX_GROUP_ROWS ? s->group_count : MAX_GROUP_ROWS;
}

static void compute_layout(const strata_plan *p, layout *l) {
  const strata_topo *t = p->topo;
  int n = t->site_count;
  l->cols = n <= 2 ? n : (int)ceil(sqrt((double)n)); /* 3 sites: a triangle */
  l->rows = (n + l->cols - 1) / l->cols;
  int max_groups = 1;
  for (int i = 0; i < n; i++)
    if (shown_groups(&t->sites[i]) > max_groups) max_groups = shown_groups(&t->sites[i]);
  l->site_h = 96 + max_groups * GROUP_ROW_H + (max_groups < t->group_count ? 18 : 0);
  l->width = 2 * MARGIN + l->cols * SITE_W + (l->cols - 1) * GAP_X;
  /* wide enough for the title (22 px bold, ~13 px a character) and the findings lines */
  const char *title = t->name[0] ? t->name : t->source;
  double title_w = 2 * MARGIN + 13.0 * (double)(strlen(title) + 48);
  if (l->width < title_w) l->width = title_w;
  if (l->width < 1100) l->width = 1100;
  l->height = TOP + l->rows * l->site_h + (l->rows - 1) * GAP_Y + 60;
}

static void site_origin(const layout *l, int i, int n, double *x, double *y) {
  int row = i / l->cols, col = i % l->cols;
  int in_row = row == l->rows - 1 ? n - row * l->cols : l->cols;
  double row_w = in_row * SITE_W + (in_row - 1) * GAP_X;
  double left = (l->width - row_w) / 2;
  *x = left + col * (SITE_W + GAP_X);
  *y = TOP + row * (l->site_h + GAP_Y);
}

static const char *fabric_label(const strata_plan *p, int site, char *buf, size_t len) {
  const strata_topo_site *s = &p->topo->sites[site];
  const strata_topo_fabric *f = &s->fabric;
  int64_t nodes = strata_topo_site_nodes(p->topo, site);
  if (f->kind == STRATA_FABRIC_NONE) {
    snprintf(buf, len, "layer 2: %s", nodes > 1 ? "no cluster fabric" : "single node");
    return buf;
  }
  char speed[48] = "";
  if (f->kind == STRATA_FABRIC_INFINIBAND && f->ib_speed != STRATA_IB_UNSPECIFIED)
    snprintf(speed, sizeof speed, " %s", strata_ib_speed_name(f->ib_speed));
  else if (strata_topo_is_set(f->link_gbps))
    snprintf(speed, sizeof speed, " %.0fG", f->link_gbps);
  snprintf(buf, len, "layer 2: %s%s%s%s%s", strata_fabric_kind_name(f->kind), speed,
           f->sharp == 1 ? " + SHARP" : "",
           f->kind == STRATA_FABRIC_ROCE && f->pfc == 1 ? " PFC" : "",
           f->kind == STRATA_FABRIC_ROCE && f->ecn == 1 ? "+ECN" : "");
  return buf;
}

/* One node glyph: a rounded box with up to 8 GPU squares on a green layer-1 bar. */
static void draw_node_glyph(FILE *out, double x, double y, const strata_topo_node_spec *spec) {
  int gpus = spec->gpus;
  int drawn = gpus > 8 ? 8 : gpus;
  double w = 20 + (drawn > 0 ? drawn : 1) * 16;
  fprintf(out,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"40\" rx=\"5\" fill=\"#ffffff\" "
          "stroke=\"#444\" stroke-width=\"1.2\"/>\n",
          x, y, w);
  if (drawn > 1)
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"%s\"/>\n",
            x + 14, y + 30, x + w - 14, y + 30,
            spec->intra == STRATA_INTRA_NVLINK ? COLOR_L1 : "#9bbf9f",
            spec->intra == STRATA_INTRA_NVLINK ? "4" : "2");
  for (int i = 0; i < drawn; i++)
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"14\" rx=\"2\" fill=\"#76b900\" "
            "stroke=\"#3d6600\" stroke-width=\"0.8\"/>\n",
            x + 10 + i * 16, y + 8);
  if (gpus > 8) text_at(out, x + w + 4, y + 19, "font-size=\"11\" fill=\"#333\"", "...");
}

static void draw_group(FILE *out, const strata_plan *p, const strata_topo_node_group *g, double x,
                       double y) {
  const strata_topo_node_spec *spec = &g->spec;
  draw_node_glyph(out, x, y, spec);
  char line[200], intra[120];
  snprintf(line, sizeof line, "%lld x %s", (long long)g->count,
           g->name[0] ? g->name : (g->template_name[0] ? g->template_name : "node"));
  text_at(out, x + 170, y + 15, "font-size=\"14\" font-weight=\"bold\" fill=\"#222\"", line);
  double gbps = strata_plan_intra_gbps(spec, NULL);
  if (spec->gpus <= 0)
    snprintf(intra, sizeof intra, "CPU only");
  else if (spec->intra == STRATA_INTRA_NVLINK)
    snprintf(intra, sizeof intra, "%d x %s - NVLink%d%s - %.0f GB/s/GPU", spec->gpus,
             strata_gpu_model_name(spec->gpu), (int)spec->nvlink,
             spec->nvswitch_domain_gpus > 1 ? "+NVSwitch" : "", gbps);
  else
    snprintf(intra, sizeof intra, "%d x %s - %s - %.0f GB/s/GPU", spec->gpus,
             strata_gpu_model_name(spec->gpu),
             spec->intra == STRATA_INTRA_PCIE ? "PCIe P2P" : "no P2P", gbps > 0 ? gbps : 18.5);
  text_at(out, x + 170, y + 32, "font-size=\"12\" fill=\"" COLOR_L1 "\"", intra);
  double nic = strata_plan_node_nic_gbit(spec);
  if (nic > 0) {
    snprintf(line, sizeof line, "NICs %.0f Gb/s per node (%.0f per GPU)", nic,
             spec->gpus > 0 ? nic / spec->gpus : nic);
    text_at(out, x + 170, y + 47, "font-size=\"11\" fill=\"" COLOR_L2 "\"", line);
  }
  (void)p;
}

/* The ids of findings about `name` (a link or site; their `where` ends in "(name)"), joined. */
static int findings_about(const strata_plan *p, const char *name, char *buf, size_t len,
                          int *worst) {
  char tag[STRATA_TOPO_NAME_MAX + 4];
  snprintf(tag, sizeof tag, "(%s)", name);
  size_t used = 0;
  int n = 0;
  buf[0] = 0;
  *worst = -1;
  for (int i = 0; i < p->finding_count; i++) {
    const strata_finding *f = &p->findings[i];
    size_t wl = strlen(f->where), tl = strlen(tag);
    if (wl < tl || strcmp(f->where + wl - tl, tag) != 0) continue;
    int w = snprintf(buf + used, len - used, "%s%s", n ? ", " : "", f->id);
    if (w < 0 || (size_t)w >= len - used) break;
    used += (size_t)w;
    n++;
    if ((int)f->severity > *worst) *worst = (int)f->severity;
  }
  return n;
}

static void draw_badge(FILE *out, double x, double y, const char *anchor, const strata_plan *p,
                       const char *name) {
  char ids[240];
  int worst;
  if (findings_about(p, name, ids, sizeof ids, &worst) == 0) return;
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "font-size=\"12\" font-weight=\"bold\" text-anchor=\"%s\" fill=\"%s\"", anchor,
           worst == STRATA_SEVERITY_ERROR ? COLOR_ERROR : COLOR_WARNING);
  char line[260];
  snprintf(line, sizeof line, "! %s", ids);
  text_at(out, x, y, attrs, line);
}

static void draw_site(FILE *out, const strata_plan *p, const layout *l, int i) {
  const strata_topo *t = p->topo;
  const strata_topo_site *s = &t->sites[i];
  double x, y;
  site_origin(l, i, t->site_count, &x, &y);
  fprintf(out,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" rx=\"12\" "
          "fill=\"#f4f8fd\" stroke=\"" COLOR_L2 "\" stroke-width=\"2.5\"/>\n",
          x, y, SITE_W, l->site_h);
  char line[240];
  text_at(out, x + 16, y + 28, "font-size=\"19\" font-weight=\"bold\" fill=\"#111\"", s->name);
  snprintf(line, sizeof line, "%s%s%s - %lld GPUs", strata_provider_name(s->provider),
           s->region[0] ? ", " : "", s->region, (long long)strata_topo_site_gpus(t, i));
  text_at(out, x + 16, y + 48, "font-size=\"12\" fill=\"#555\"", line);
  /* the fabric bar: layer 2 */
  fprintf(out,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"22\" rx=\"4\" fill=\"" COLOR_L2
          "\"/>\n",
          x + 16, y + 60, SITE_W - 32);
  text_at(out, x + 26, y + 76, "font-size=\"13\" font-weight=\"bold\" fill=\"#ffffff\"",
          fabric_label(p, i, line, sizeof line));
  int shown = shown_groups(s);
  for (int g = 0; g < shown; g++)
    draw_group(out, p, &t->groups[s->group_begin + g], x + 16, y + 94 + g * GROUP_ROW_H);
  draw_badge(out, x + 16, y + l->site_h - 10, "start", p, s->name);
  if (s->group_count > shown) {
    snprintf(line, sizeof line, "+ %d more node groups", s->group_count - shown);
    text_at(out, x + 16, y + 94 + shown * GROUP_ROW_H + 8, "font-size=\"12\" fill=\"#555\"", line);
  }
}

static void site_center(const layout *l, int i, int n, double *cx, double *cy) {
  double x, y;
  site_origin(l, i, n, &x, &y);
  *cx = x + SITE_W / 2.0;
  *cy = y + l->site_h / 2.0;
}

/* Where the segment from the centre towards (dx,dy) leaves the site box. */
static void box_exit(const layout *l, double cx, double cy, double dx, double dy, double *ex,
                     double *ey) {
  double hw = SITE_W / 2.0, hh = l->site_h / 2.0;
  double sx = dx != 0 ? hw / fabs(dx) : INFINITY, sy = dy != 0 ? hh / fabs(dy) : INFINITY;
  double s = sx < sy ? sx : sy;
  *ex = cx + dx * s;
  *ey = cy + dy * s;
}

static void draw_link(FILE *out, const strata_plan *p, const layout *l, int i, int label) {
  const strata_topo *t = p->topo;
  const strata_topo_link *k = &t->links[i];
  strata_wan_model m;
  strata_plan_link_model(p, i, &m);
  double ax, ay, bx, by;
  site_center(l, k->site_a, t->site_count, &ax, &ay);
  site_center(l, k->site_b, t->site_count, &bx, &by);
  double dx = bx - ax, dy = by - ay;
  double x1, y1, x2, y2;
  box_exit(l, ax, ay, dx, dy, &x1, &y1);
  box_exit(l, bx, by, -dx, -dy, &x2, &y2);
  const char *color = m.is_extension ? COLOR_L3B : m.is_overlay ? COLOR_L3C : COLOR_L3A;
  const char *dash = m.is_overlay ? " stroke-dasharray=\"12 7\"" : "";
  double width = m.is_extension ? 7 : 5;
  if (!label) {
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"%.1f\" stroke-linecap=\"round\"%s/>\n",
            x1, y1, x2, y2, color, width, dash);
    return;
  }
  /* the label: three short lines in a white box, in the gap between the two sites */
  char l1[160], l2[160], l3[160];
  const char *kind = m.is_extension ? strata_extension_kind_name(k->extension.kind)
                     : m.is_overlay ? "wireguard"
                                    : "routed IP";
  snprintf(l1, sizeof l1, "%s: %s", m.is_extension ? "3b" : m.is_overlay ? "3c" : "3a", kind);
  if (m.km >= 0)
    snprintf(l2, sizeof l2, "%s, %.0f km", strata_phys_kind_name(k->physical.kind), m.km);
  else
    snprintf(l2, sizeof l2, "%s", strata_phys_kind_name(k->physical.kind));
  double gbit = m.gbps * 8;
  snprintf(l3, sizeof l3, gbit >= 100 ? "%s%.0f Gb/s - RTT %.2g ms" : "%s%.3g Gb/s - RTT %.2g ms",
           m.measured ? "measured: " : "", gbit, m.rtt_ms);
  /* diagonals of a grid cross in its middle: slide each label along its own line, to opposite
   * sides of the crossing */
  double at = fabs(dx) > 1 && fabs(dy) > 1 ? (dx * dy > 0 ? 0.28 : 0.72) : 0.5;
  double mx = x1 + (x2 - x1) * at, my = y1 + (y2 - y1) * at;
  size_t longest = strlen(l1);
  if (strlen(l2) > longest) longest = strlen(l2);
  if (strlen(l3) > longest) longest = strlen(l3);
  double w = 7.2 * (double)longest + 18;
  fprintf(out,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"58\" rx=\"6\" fill=\"#ffffff\" "
          "stroke=\"%s\" stroke-width=\"2\"/>\n",
          mx - w / 2, my - 29, w, color);
  fprintf(out,
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\" "
          "text-anchor=\"middle\" fill=\"%s\">",
          mx, my - 11, color);
  xml_text(out, l1);
  fprintf(out,
          "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
          "fill=\"#222\">",
          mx, my + 5);
  xml_text(out, l2);
  fprintf(out,
          "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
          "fill=\"#222\">",
          mx, my + 21);
  xml_text(out, l3);
  fputs("</text>\n", out);
  draw_badge(out, mx, my + 45, "middle", p, k->name);
}

static void draw_legend(FILE *out, double x, double y) {
  const struct {
    const char *color, *label, *dash;
    double width;
  } items[] = {
      {COLOR_L1, "layer 1: NVLink / PCIe in a node", "", 4},
      {COLOR_L2, "layer 2: site fabric (IB / RoCE / Ethernet)", "", 6},
      {COLOR_L3A, "3a: routed IP on the physical path", "", 5},
      {COLOR_L3B, "3b: fabric extension (MetroX ...)", "", 7},
      {COLOR_L3C, "3c: overlay (WireGuard)", "12 7", 5},
  };
  for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
    double ix = x + (double)(i % 3) * 330, iy = y + (double)(i / 3) * 22;
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"%.0f\"%s%s%s/>\n",
            ix, iy - 4, ix + 36, iy - 4, items[i].color, items[i].width,
            items[i].dash[0] ? " stroke-dasharray=\"" : "", items[i].dash,
            items[i].dash[0] ? "\"" : "");
    text_at(out, ix + 44, iy, "font-size=\"12\" fill=\"#333\"", items[i].label);
  }
}

static void draw_footer(FILE *out, const strata_plan *p, double y, double width) {
  char line[600];
  snprintf(line, sizeof line, "decision: %s", p->decision);
  text_at(out, MARGIN, y, "font-size=\"16\" font-weight=\"bold\" fill=\"#111\"", line);
  if (p->comm_ms_per_step > 0 && p->utilization > 0) {
    snprintf(line, sizeof line, "%.3g ms communication per %.0f ms step - %.0f%% utilization",
             p->comm_ms_per_step, p->workload.step_ms, 100 * p->utilization);
    text_at(out, MARGIN + 300, y, "font-size=\"14\" fill=\"#333\"", line);
  }
  int errors = 0, warnings = 0;
  for (int i = 0; i < p->finding_count; i++) {
    if (p->findings[i].severity == STRATA_SEVERITY_ERROR) errors++;
    if (p->findings[i].severity == STRATA_SEVERITY_WARNING) warnings++;
  }
  if (p->finding_count == 0) {
    text_at(out, MARGIN, y + 24, "font-size=\"14\" fill=\"" COLOR_L1 "\"", "no findings");
    return;
  }
  snprintf(line, sizeof line, "%d error%s, %d warning%s", errors, errors == 1 ? "" : "s", warnings,
           warnings == 1 ? "" : "s");
  text_at(out, MARGIN, y + 24,
          errors ? "font-size=\"14\" font-weight=\"bold\" fill=\"" COLOR_ERROR "\""
                 : "font-size=\"14\" font-weight=\"bold\" fill=\"" COLOR_WARNING "\"",
          line);
  for (int i = 0; i < p->finding_count && i < 8; i++) {
    const strata_finding *f = &p->findings[i];
    snprintf(line, sizeof line, "%s %s: %.*s", strata_severity_name(f->severity), f->id,
             (int)((width - 2 * MARGIN) / 6.8) - 30, f->message);
    text_at(out, MARGIN, y + 46 + i * 19,
            f->severity == STRATA_SEVERITY_ERROR ? "font-size=\"12\" fill=\"" COLOR_ERROR "\""
                                                 : "font-size=\"12\" fill=\"" COLOR_WARNING "\"",
            line);
  }
}

void strata_plan_write_svg(FILE *out, const strata_plan *p) {
  const strata_topo *t = p->topo;
  layout l;
  compute_layout(p, &l);
  int shown_findings = p->finding_count < 8 ? p->finding_count : 8;
  double footer_y = l.height + 10;
  double total_h = footer_y + 60 + shown_findings * 19 + 20;
  fprintf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, "
          "sans-serif\">\n",
          l.width, total_h, l.width, total_h);
  fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
  char title[400];
  snprintf(title, sizeof title, "%.120s - %d site%s, %lld nodes, %lld GPUs - workload %s",
           t->name[0] ? t->name : t->source, p->sites, p->sites == 1 ? "" : "s",
           (long long)p->nodes, (long long)p->gpus, strata_workload_kind_name(p->workload.kind));
  text_at(out, MARGIN, 34, "font-size=\"22\" font-weight=\"bold\" fill=\"#111\"", title);
  draw_legend(out, MARGIN, 62);
  for (int i = 0; i < t->site_count; i++) draw_site(out, p, &l, i);
  for (int i = 0; i < t->link_count; i++) draw_link(out, p, &l, i, 0); /* lines under labels */
  for (int i = 0; i < t->link_count; i++) draw_link(out, p, &l, i, 1);
  draw_footer(out, p, footer_y, l.width);
  fputs("</svg>\n", out);
}
