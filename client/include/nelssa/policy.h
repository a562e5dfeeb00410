/* SPDX-License-Identifier: MIT */
/*
 * Placement policy for the GPU node (DESIGN §3.7): the decode-attention
 * latency model, the crossover context length T_input above which the PNM
 * tier is faster, the router with admission control for the PNM tier, and
 * the choice of a migration victim.  One implementation serves the live
 * client and the simulator.  Documentation/policy.rst has the model, its
 * units and the profiles.
 */
#ifndef NELSSA_POLICY_H
#define NELSSA_POLICY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * struct nelssa_hw_profile - the hardware the model runs on.
 * @name: profile name.
 * @gpu_bw: GPU memory bandwidth, bytes/s.
 * @gpu_mem: GPU memory, bytes.
 * @pnm_bw: one PNM device's effective sparse-attention bandwidth, bytes/s
 *	of KV read (measured: nelssactl bench attn, or calibrate).
 * @pnm_mem: one PNM device's memory, bytes.
 * @t_base: per-layer communication cost independent of N, seconds.
 * @t_dev: per-layer cost added by each device, seconds.
 * @t_host: per-layer host cost of merging when N > 1, seconds.
 */
struct nelssa_hw_profile {
	char name[64];
	double gpu_bw, gpu_mem;
	double pnm_bw, pnm_mem;
	double t_base, t_dev, t_host;
};

/**
 * struct nelssa_model_profile - the model and the sparse-attention setting.
 * @layers: decoder layers.
 * @kv_heads: KV heads per layer.
 * @head_dim: elements per head.
 * @elem_bytes: bytes per KV element (2 for bf16).
 * @weights: model weight bytes on the GPU.
 * @compression: C, tokens per cluster (the GPU reads one centroid per C tokens).
 * @select: S, fraction of the KV the PNM devices read per step.
 * @pnm_kv_dtype: enum nelssa_kv_dtype of the KV on the PNM devices (the
 *	offload quantises to it), or 0 for @elem_bytes there too.  An 8-bit
 *	type about halves what a token takes on a card and in its reads.
 */
struct nelssa_model_profile {
	uint32_t layers, kv_heads, head_dim, elem_bytes;
	double weights;
	double compression, select;
	uint32_t pnm_kv_dtype;
};

/**
 * nelssa_kv_bytes_per_token() - M_kv, the KV bytes of one token.
 * @m: model.
 *
 * Return: KV bytes per token over all layers, K and V:
 * 2 * layers * kv_heads * head_dim * elem_bytes.
 */
double nelssa_kv_bytes_per_token(const struct nelssa_model_profile *m);

/**
 * nelssa_pnm_kv_bytes_per_token() - the KV bytes of one token on the PNM tier.
 * @m: model.
 *
 * Return: nelssa_kv_bytes_per_token() with @m->pnm_kv_dtype 0; else
 * 2 * layers * kv_heads * the bytes a token of that type takes in a KV
 * store (nelssa_kv_bytes() of a tile over its tokens: scales and padding
 * included); NaN for a type this build does not know, which
 * nelssa_router_init() refuses.  The PNM terms of the model -- device
 * reads, device memory, migration transfers -- use it; the GPU's use
 * nelssa_kv_bytes_per_token().
 */
double nelssa_pnm_kv_bytes_per_token(const struct nelssa_model_profile *m);

/**
 * nelssa_t_comm() - T_comm(N), the communication cost of a decode step.
 * @hw: hardware.
 * @m: model.
 * @n_dev: PNM devices.
 *
 * Return: seconds for a whole decode step (all layers):
 * layers * (t_base + @n_dev * t_dev + (t_host when @n_dev > 1)).
 */
double nelssa_t_comm(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
		     uint32_t n_dev);

/**
 * nelssa_t_gpu() - T_gpu(L), dense decode attention on the GPU.
 * @hw: hardware.
 * @m: model.
 * @len: the request's context, tokens.
 *
 * Return: seconds of dense decode attention of one request of @len tokens
 * on the GPU (one step, all layers): @len * M_kv / gpu_bw.
 */
double nelssa_t_gpu(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
		    double len);

/**
 * nelssa_t_pnm() - T_pnm(L, N), decode attention with the PNM tier.
 * @hw: hardware.
 * @m: model.
 * @len: the request's context, tokens.
 * @n_dev: PNM devices, at least 1.
 *
 * Return: seconds of one decode step of one request of @len tokens:
 * centroids on the GPU (@len M_kv / (C gpu_bw)) + sparse attention on
 * @n_dev devices (S @len M_kv / (@n_dev pnm_bw)) + T_comm(@n_dev).
 */
double nelssa_t_pnm(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
		    double len, uint32_t n_dev);

/**
 * nelssa_crossover() - T_input: the context length from which PNM wins.
 * @hw: hardware.
 * @m: model.
 * @n_dev: PNM devices, at least 1.
 *
 * L*(N) = T_comm(N) / (M_kv ((C - 1) / (C BW_gpu) - S / (N BW_pnm))), the
 * length where T_gpu(L) = T_pnm(L, N).
 *
 * Return: L* in tokens, or INFINITY when the bracket is not positive (the
 * PNM tier never wins: its per-token cost is not below the GPU's).
 */
double nelssa_crossover(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
			uint32_t n_dev);

/**
 * nelssa_hw_profile_builtin() - a built-in profile by name.
 * @name: "h100-nvl" or "h200" (GPU figures from the datasheets; PNM and
 *	communication figures are defaults until measured).
 * @hw: receives it.
 *
 * Return: 0 or -ENOENT.
 */
int nelssa_hw_profile_builtin(const char *name, struct nelssa_hw_profile *hw);

/**
 * nelssa_hw_profile_load() - read a profile file.
 * @path: "key = value" lines (keys as the struct fields; sizes in bytes,
 *	bandwidths in bytes/s, times in seconds; '#' comments); a "base = NAME"
 *	line starts from a built-in profile.
 * @hw: receives the profile.
 * @err: receives a message on failure (may be NULL).
 * @err_len: its size.
 *
 * Return: 0, -ENOENT (no file, unknown base), -EINVAL (bad line or value).
 */
int nelssa_hw_profile_load(const char *path, struct nelssa_hw_profile *hw, char *err,
			   size_t err_len);

/**
 * enum nelssa_route - where a request runs, or why it waits.
 * @NELSSA_ROUTE_GPU: on the GPU.
 * @NELSSA_ROUTE_PNM: on the PNM tier (admitted: counted by the router).
 * @NELSSA_ROUTE_QUEUE: bound for the PNM tier, which is at a cap now.
 * @NELSSA_ROUTE_REFUSE: its KV fits neither tier, ever: refuse it.
 */
enum nelssa_route {
	NELSSA_ROUTE_GPU = 0,
	NELSSA_ROUTE_PNM = 1,
	NELSSA_ROUTE_QUEUE = 2,	/* bound for the PNM tier, which is at a cap now */
	NELSSA_ROUTE_REFUSE = 3,	/* its KV fits neither tier, ever: refuse it */
};

/**
 * struct nelssa_router - routing state with the PNM tier's caps.
 * @hw: hardware.
 * @m: model.
 * @n_dev: PNM devices.
 * @t_input: the threshold in use (starts at nelssa_crossover()).
 * @cap_pnm_mem: PNM memory the tier may fill, fraction of all devices' (0..1].
 * @cap_step: the PNM tier's step deadline: most seconds one decode step of
 *	the whole tier may take (nelssa_pnm_step_time()), so the most any of
 *	its requests waits for its attention per token.
 * @cap_gpu_meta: GPU bytes PNM requests' centroids and windows may take.
 * @window: tokens each PNM request keeps on the GPU (sinks + recent).
 * @pnm_tokens: tokens of the requests on the PNM tier now (state).
 * @pnm_requests: requests admitted to the PNM tier (state).
 * @why: the reason of the last answer other than a plain GPU or PNM.
 * @gpu_kv: bytes of GPU memory for KV (the pool a request must fit).
 * @pnm_final: tokens the PNM tier's requests will have at their ends,
 *	reserved at admission (state).
 * @cap_gpu_share: the most of the GPU's time the centroids and windows of
 *	requests only the PNM tier can hold (their KV is over gpu_kv) may take;
 *	nelssa_pnm_step_of() spaces their tokens to keep it.
 * @cap_pnm_share: the same for their share of the PNM devices' time while
 *	the tier also serves requests the GPU could hold.
 * @net_bw: bytes/s a migration moves KV at (nelssa_pick_migration_final()).
 * @cap_migrate_pause: the most a migration's pause may add to each of the
 *	request's remaining tokens, as a fraction of cap_step.
 * @extra_tokens: the tokens of those requests now (state).
 * @extra_final: their tokens at their ends (state).
 * @extra_requests: how many there are (state).
 */
struct nelssa_router {
	struct nelssa_hw_profile hw;
	struct nelssa_model_profile m;
	uint32_t n_dev;
	double t_input;
	double cap_pnm_mem, cap_step, cap_gpu_meta;
	uint32_t window;
	double pnm_tokens;
	uint32_t pnm_requests;
	char why[160];
	double gpu_kv;
	double pnm_final;
	double cap_gpu_share, cap_pnm_share;
	double net_bw, cap_migrate_pause;
	double extra_tokens, extra_final;
	uint32_t extra_requests;
};

/**
 * nelssa_router_init() - a router at the crossover threshold.
 * @r: the router.
 * @hw: hardware.
 * @m: model.
 * @n_dev: PNM devices, at least 1.
 *
 * The GPU's KV pool defaults to 90 % of its memory less the weights; the
 * caps to 90 % of PNM memory, a step deadline of the GPU's own decode step
 * with its whole pool in the batch ((weights + gpu_kv) / gpu_bw: the
 * slowest step the GPU alone runs), and 10 % of GPU memory for centroids
 * and windows.  Change the fields to set others.  Documentation/policy.rst
 * has the rules and a worked example.
 *
 * Return: 0 or -EINVAL.
 */
int nelssa_router_init(struct nelssa_router *r, const struct nelssa_hw_profile *hw,
		       const struct nelssa_model_profile *m, uint32_t n_dev);

/**
 * nelssa_pnm_step_time() - the PNM tier's decode step at a given load.
 * @r: the router.
 * @tokens: admitted tokens, of all the tier's requests.
 * @reqs: the requests they belong to.
 *
 * Return: seconds per decode step the PNM tier takes for @tokens admitted
 * tokens in @reqs requests: their sparse reads on the router's devices
 * plus T_comm; 0 when @reqs is 0.
 */
double nelssa_pnm_step_time(const struct nelssa_router *r, double tokens, uint32_t reqs);

/**
 * struct nelssa_route_query - a request to route.
 * @len: its context now, tokens (its input, or its current length when it
 *	is readmitted or migrated).
 * @final_len: its length at its end (input + output); below @len: @len.
 *	The router reserves it on the PNM tier, so the tier never runs out.
 * @gpu_free: GPU KV bytes free now, so that a request the PNM tier cannot
 *	take yet may start on the GPU instead; 0: do not.
 * @prev: -1 for a new request; NELSSA_ROUTE_GPU or NELSSA_ROUTE_PNM for one
 *	preempted there and readmitted.
 * @pinned: readmit a preempted request only where it was (@prev): no
 *	migration.
 * @behind: an older request is waiting for the PNM tier; this one may not
 *	pass it there (the tier is first come, first served).
 */
struct nelssa_route_query {
	double len, final_len, gpu_free;
	int prev, pinned, behind;
};

/* What nelssa_router_fits() answers. */
enum { NELSSA_FITS_GPU = 1, NELSSA_FITS_PNM = 2 };

/**
 * nelssa_router_fits() - where a request can ever run.
 * @r: the router.
 * @final_len: the request's length at its end, tokens.
 *
 * On the GPU when its KV fits gpu_kv; on the PNM tier when its KV fits
 * the PNM memory cap and its centroids and window the GPU memory cap, the
 * tier otherwise empty.
 *
 * Return: a bitmask of NELSSA_FITS_GPU and NELSSA_FITS_PNM; 0 when it
 * fits neither.
 */
int nelssa_router_fits(const struct nelssa_router *r, double final_len);

/**
 * nelssa_route() - route a request and admit it when it goes to PNM.
 * @r: the router.
 * @q: the request.
 *
 * A request whose KV fits neither tier is REFUSEd (r->why says why); one
 * that fits one tier only goes to that tier; one that fits both goes to
 * the PNM tier from t_input on, else the GPU; a preempted one pinned to
 * where it ran goes back there.  Bound for the PNM tier, it is admitted
 * (counted until nelssa_router_leave()) when the tier's memory, its GPU
 * metadata and its step deadline all hold with it; a request alone over
 * the deadline is admitted to an empty tier when the GPU cannot hold it
 * (nothing serves it sooner) and goes to the GPU otherwise.  When the tier
 * cannot take it now (or an older request waits for it, @behind), it
 * starts on the GPU if it fits there and @gpu_free holds its KV, else
 * QUEUE, r->why naming the cap.
 *
 * Return: enum nelssa_route.
 */
enum nelssa_route nelssa_route(struct nelssa_router *r, const struct nelssa_route_query *q);

/**
 * nelssa_route_request() - route a new request of a known length.
 * @r: the router.
 * @len: its context, tokens; also its length at its end.
 *
 * nelssa_route() of a new request of @len tokens that ends at @len, the
 * GPU's free memory unknown (@gpu_free 0), not pinned, behind no one.
 *
 * Return: enum nelssa_route.
 */
enum nelssa_route nelssa_route_request(struct nelssa_router *r, double len);

/**
 * nelssa_router_leave() - a request left the PNM tier.
 * @r: the router.
 * @len: its tokens now.
 * @final_len: the tokens reserved for it at admission (its length at its
 *	end).
 *
 * Takes the request out of the tier's counts (never below zero), and out
 * of those of the requests only the tier can hold when it is one.
 */
void nelssa_router_leave(struct nelssa_router *r, double len, double final_len);

/**
 * nelssa_router_release() - a request admitted by nelssa_route_request() left.
 * @r: the router.
 * @len: its tokens now.
 *
 * nelssa_router_leave(@r, @len, @len).
 */
void nelssa_router_release(struct nelssa_router *r, double len);

/**
 * nelssa_router_grow() - a PNM request's context grew.
 * @r: the router.
 * @tokens: tokens it produced.
 * @final_len: its length at its end (tells which class it is in).
 *
 * Adds @tokens to the tier's tokens now; its reservation is unchanged.
 */
void nelssa_router_grow(struct nelssa_router *r, double tokens, double final_len);

/**
 * nelssa_pnm_step_of() - seconds from one token of a PNM request to its next.
 * @r: the router.
 * @final_len: the request's length at its end.
 * @t_gpu_step: the GPU's decode step now, seconds (0: not known).
 *
 * The tier serves two classes.  A request the GPU could also hold sees its
 * class's sparse reads and T_comm, stretched by 1 / (1 - cap_pnm_share)
 * while requests only the tier holds are on it.  Those wait for the whole
 * tier's step and are paced further, so that their centroids and windows
 * add at most cap_gpu_share of the weights' read to each GPU step (a
 * token every (their GPU bytes / (gpu_bw cap_gpu_share)) x (t_gpu_step /
 * (weights / gpu_bw)) s) and, beside the other class, their sparse reads
 * take at most cap_pnm_share of the devices' time: a node serves what the
 * GPU alone would refuse without taking more than that from what the GPU
 * alone would serve.
 *
 * Return: seconds, at the tier's load now.
 */
double nelssa_pnm_step_of(const struct nelssa_router *r, double final_len, double t_gpu_step);

/**
 * nelssa_pick_migration() - the GPU request to move to the PNM tier.
 * @r: the router.
 * @ctx: current context lengths of the GPU's requests.
 * @n: how many.
 * @gpu_kv_used: fraction of the GPU's KV memory in use.
 * @high_water: migrate only at or above this fraction.
 *
 * Candidates are requests whose context passed t_input; the largest that
 * the PNM tier can admit is chosen (ties: the lower index).
 *
 * Return: its index, or -1 (below the watermark, no candidate, or none
 * admissible).  The caller then routes it with nelssa_route_request().
 */
int nelssa_pick_migration(const struct nelssa_router *r, const double *ctx, size_t n,
			  double gpu_kv_used, double high_water);

/**
 * nelssa_pick_migration_final() - the GPU request to move, knowing its end.
 * @r: the router.
 * @ctx: current context lengths of the GPU's requests.
 * @final_ctx: each one's length at its end, which the PNM tier must
 *	reserve; NULL: @ctx (then this is nelssa_pick_migration()).
 * @n: how many.
 * @gpu_kv_used: fraction of the GPU's KV memory in use.
 * @high_water: migrate only at or above this fraction.
 *
 * nelssa_pick_migration() with one more condition when @final_ctx is
 * given: the candidate's pause while ctx M_kv crosses at net_bw, spread
 * over its remaining tokens, is at most cap_migrate_pause x cap_step per
 * token -- a request near its end is not worth moving.
 *
 * Return: its index, or -1 (below the watermark, no candidate, or none
 * admissible).  The caller then routes it with nelssa_route().
 */
int nelssa_pick_migration_final(const struct nelssa_router *r, const double *ctx,
				const double *final_ctx, size_t n, double gpu_kv_used,
				double high_water);

/**
 * struct nelssa_threshold_ctl - the load-adaptive threshold's state.
 * @base: T_input from the model (nelssa_crossover()).
 * @x: log2 of the current multiplier: T_input = base * 2^x.
 * @u_gpu: the GPU tier's mean pressure over the last period.
 * @u_pnm: the PNM tier's mean pressure over the last period.
 * @period: seconds of samples behind each decision.
 * @gain: change of x per unit of imbalance in one decision.
 * @deadband: imbalance below which x holds still.
 * @max_step: largest change of x in one decision.
 * @hold: seconds x must have held still before it may move the other way.
 * @x_min: lowest x (the threshold never drops below base * 2^x_min).
 * @x_max: highest x.
 * @acc: seconds of samples in the current period (internal).
 * @sum_gpu: time-weighted sum of the GPU samples in it (internal).
 * @sum_pnm: the same for the PNM tier (internal).
 * @still: seconds since x last moved (internal).
 * @dir: direction of the last move, -1, 0 or +1 (internal).
 *
 * The control law, a sampled integral with a deadband, a rate limit and a
 * hold before any reversal.  Every @period seconds, over the means of the
 * samples of that period:
 *
 *	e  = mean(u_gpu) - mean(u_pnm)
 *	x <- clamp(x - clamp(gain e, +-max_step), x_min, x_max)   when |e| > deadband
 *	   unless that reverses the last move and x has not held still for @hold
 *
 * A busier GPU tier (e > 0) lowers the threshold and sends more requests
 * to the PNM tier, a busier PNM tier raises it.  The samples are the
 * caller's measure of each tier's pressure: how far its own memory use and
 * queueing delay are past what it serves comfortably, 0 when it keeps up.
 * A period longer than the time a move takes to show in the samples, and
 * gain times the imbalance's slope below 1, make each decision see the
 * last one's full effect: x approaches its balance without overshoot.
 * Documentation/policy.rst says more.
 */
struct nelssa_threshold_ctl {
	double base, x, u_gpu, u_pnm;
	double period, gain, deadband, max_step, hold, x_min, x_max;
	double acc, sum_gpu, sum_pnm, still, dir;
};

/**
 * nelssa_threshold_init() - a controller with the default settings.
 * @c: the controller to initialise.
 * @base: T_input from the model (nelssa_crossover()).
 *
 * Defaults: period 60 s, gain 0.2, deadband 0.15, max_step 0.25, hold
 * 120 s, x in [-2, 0], starting at x = 0: the threshold moves between a
 * quarter of the model's crossover and the crossover itself, never above
 * it (above it the PNM tier is the faster one for a request alone, and
 * long requests moved to the GPU fill its memory).
 */
void nelssa_threshold_init(struct nelssa_threshold_ctl *c, double base);

/**
 * nelssa_threshold_update() - feed one measurement, get the threshold.
 * @c: the controller.
 * @u_gpu: GPU-tier pressure sample (>= 0), for the last @dt seconds.
 * @u_pnm: PNM-tier pressure sample (>= 0), for the last @dt seconds.
 * @dt: seconds since the last update (> 0).
 *
 * Return: the threshold to use now, base * 2^x.
 */
double nelssa_threshold_update(struct nelssa_threshold_ctl *c, double u_gpu, double u_pnm,
			       double dt);

/**
 * struct nelssa_place_node - one NELSSA node, as placement sees it.
 * @used_tokens: tokens it holds (others' as reported, ours at final length).
 * @cap_tokens: the most it may hold.
 * @devices: its PNM devices (0: never placed on).
 * @steps_in_flight: its decode steps being served now (ties).
 * @eligible: it may take requests (listed, not found dead).
 * @id: its name (ties after @steps_in_flight; NULL: index order).
 */
struct nelssa_place_node {
	double used_tokens, cap_tokens;
	uint32_t devices, steps_in_flight;
	int eligible;
	const char *id;
};

/**
 * nelssa_place_pick() - the node a request of @tokens goes to.
 * @nodes: the nodes.
 * @n: how many.
 * @tokens: the request's tokens at its end.
 *
 * Among the eligible nodes with room (used + @tokens <= cap), the one whose
 * decode step would stream the fewest tokens per device afterwards,
 * (used + @tokens) / devices; ties to fewer steps in flight, then the id
 * (or the index).  The one rule of the client library's placement
 * (<nelssa/placement.h>) and of nelssa-sim's cluster (Documentation/cluster.rst).
 *
 * Return: the node's index, or -ENOSPC when none has room.
 */
int nelssa_place_pick(const struct nelssa_place_node *nodes, uint32_t n, double tokens);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_POLICY_H */
