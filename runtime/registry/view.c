// SPDX-License-Identifier: MIT
/*
 * The cluster as a reader of the registry sees it: the records under
 * /nelssa/CLUSTER/nodes/, each believed whole or set aside with the reason
 * -- so that a garbage entry, another version's, or one a person wrote by
 * hand is a log line and never a node a request is placed on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/registry.h>

void nelssa_registry_nodes_free(struct nelssa_node *nodes, size_t n)
{
	for (size_t i = 0; i < n && nodes; i++)
		nelssa_node_release(&nodes[i]);
	free(nodes);
}

int nelssa_registry_nodes(struct nelssa_etcd *e, const char *cluster, struct nelssa_node **nodes,
			  size_t *n, int64_t *revision, nelssa_registry_bad_fn bad, void *arg)
{
	struct nelssa_etcd_kv *kvs;
	struct nelssa_node *out;
	char prefix[128];
	size_t cnt, k = 0;
	int ret;

	*nodes = NULL;
	*n = 0;
	ret = nelssa_node_key(prefix, sizeof(prefix), cluster, NULL);
	if (ret)
		return ret;
	ret = nelssa_etcd_get_prefix(e, prefix, &kvs, &cnt, revision);
	if (ret)
		return ret;
	out = calloc(cnt ? cnt : 1, sizeof(*out));
	if (!out) {
		nelssa_etcd_kvs_free(kvs, cnt);
		return -ENOMEM;
	}
	for (size_t i = 0; i < cnt; i++) {
		const char *id = kvs[i].key + strlen(prefix);
		char why[160];

		if (!nelssa_registry_name_ok(id)) {
			if (bad)
				bad(arg, kvs[i].key, "the key does not end in a node name");
			continue;
		}
		if (nelssa_node_from_json(kvs[i].value, kvs[i].value_len, id, &out[k], why,
					  sizeof(why))) {
			if (bad)
				bad(arg, kvs[i].key, why);
			continue;
		}
		out[k++].lease = kvs[i].lease;
	}
	nelssa_etcd_kvs_free(kvs, cnt);
	*nodes = out;
	*n = k;
	return 0;
}
