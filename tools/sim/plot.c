// SPDX-License-Identifier: MIT
/*
 * SVG line charts of nelssa-sim's time series: one polyline per run, axes
 * with five ticks each, a legend.  Plain SVG 1.1, viewable in any browser.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "sim.h"

static double value(const struct sim_point *p, int field)
{
	switch (field) {
	case 0: return p->tokens_per_s;
	case 1: return p->kv_util;
	case 2: return p->batch;
	case 3: return p->queue;
	default: return p->t_input;
	}
}

int sim_plot_svg(const char *path, const char *title, const char *ylabel,
		 const struct sim_result *const *res, const char *const *names, int n, int field)
{
	static const char *const colour[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd",
					      "#ff7f0e", "#8c564b" };
	const double w = 760, h = 420, x0 = 70, y0 = 30, pw = 640, ph = 320;
	double tmax = 0, vmax = 0;
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	for (int k = 0; k < n; k++)
		for (uint32_t i = 0; i < res[k]->n_series; i++) {
			tmax = fmax(tmax, res[k]->series[i].t);
			vmax = fmax(vmax, value(&res[k]->series[i], field));
		}
	tmax = tmax > 0 ? tmax : 1;
	vmax = vmax > 0 && isfinite(vmax) ? vmax * 1.05 : 1;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		   "font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"14\">%s</text>\n", x0, title);
	fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
		   "stroke=\"#444\"/>\n", x0, y0, pw, ph);
	for (int i = 0; i <= 4; i++) {
		double x = x0 + pw * i / 4, y = y0 + ph - ph * i / 4;

		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%.0f</text>\n", x,
			y0 + ph + 16, tmax * i / 4);
		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.3g</text>\n", x0 - 6,
			y + 4, vmax * i / 4);
		fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#ddd\"/>\n",
			x0, y, x0 + pw, y);
	}
	fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time (s)</text>\n",
		x0 + pw / 2, y0 + ph + 34);
	fprintf(f, "<text transform=\"translate(16,%.0f) rotate(-90)\" text-anchor=\"middle\">%s"
		   "</text>\n", y0 + ph / 2, ylabel);
	for (int k = 0; k < n; k++) {
		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
			colour[k % 6]);
		for (uint32_t i = 0; i < res[k]->n_series; i++) {
			const struct sim_point *p = &res[k]->series[i];

			fprintf(f, "%.1f,%.1f ", x0 + pw * p->t / tmax,
				y0 + ph - ph * fmin(value(p, field), vmax) / vmax);
		}
		fprintf(f, "\"/>\n<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s</text>\n",
			x0 + pw - 150, y0 + 16 + 16.0 * k, colour[k % 6], names[k]);
	}
	fprintf(f, "</svg>\n");
	return fclose(f) ? -EIO : 0;
}
