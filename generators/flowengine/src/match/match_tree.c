/* match_tree.c - see match_tree.h. */
#include "match_tree.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TREE_MALLOC_HEADER 16

struct tree_node {
    struct match_flow f;
    struct tree_node *left, *right;
    int height;
};

struct tree {
    struct tree_node **roots;
    struct match_mod mod; /* the line of a hash */
    uint64_t size, flows, used, held, budget;
};

static const uint64_t tree_node_bytes = sizeof(struct tree_node) + TREE_MALLOC_HEADER;

static int height(const struct tree_node *n)
{
    return n ? n->height : 0;
}

static void fix_height(struct tree_node *n)
{
    int l = height(n->left), r = height(n->right);
    n->height = 1 + (l > r ? l : r);
}

static struct tree_node *rotate_right(struct tree_node *y)
{
    struct tree_node *x = y->left;
    y->left = x->right;
    x->right = y;
    fix_height(y);
    fix_height(x);
    return x;
}

static struct tree_node *rotate_left(struct tree_node *x)
{
    struct tree_node *y = x->right;
    x->right = y->left;
    y->left = x;
    fix_height(x);
    fix_height(y);
    return y;
}

static struct tree_node *rebalance(struct tree_node *n)
{
    fix_height(n);
    int b = height(n->left) - height(n->right);
    if (b > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (b < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

/* NODE is not in the tree (the caller searched first). Depth <= 1.44 log2(L). */
static struct tree_node *avl_insert(struct tree_node *root, struct tree_node *node)
{
    if (!root)
        return node;
    if (match_key_cmp(&node->f.key, &root->f.key) < 0)
        root->left = avl_insert(root->left, node);
    else
        root->right = avl_insert(root->right, node);
    return rebalance(root);
}

static struct tree_node *avl_pop_min(struct tree_node *root, struct tree_node **min)
{
    if (!root->left) {
        *min = root;
        return root->right;
    }
    root->left = avl_pop_min(root->left, min);
    return rebalance(root);
}

static struct tree_node *avl_remove(struct tree_node *root, const struct match_key *key,
                                    struct tree_node **gone)
{
    if (!root)
        return NULL;
    int c = match_key_cmp(key, &root->f.key);
    if (c < 0) {
        root->left = avl_remove(root->left, key, gone);
    } else if (c > 0) {
        root->right = avl_remove(root->right, key, gone);
    } else {
        *gone = root;
        if (!root->right)
            return root->left;
        if (!root->left)
            return root->right;
        struct tree_node *min;
        struct tree_node *right = avl_pop_min(root->right, &min);
        min->left = root->left;
        min->right = right;
        return rebalance(min);
    }
    return rebalance(root);
}

static int tree_footprint(uint64_t size, uint64_t *fixed, uint64_t *per_flow)
{
    if (!size)
        return -EINVAL;
    *fixed = match_mul_bytes(size, sizeof(struct tree_node *));
    *per_flow = tree_node_bytes;
    return 0;
}

static int tree_create(void **table, const struct match_params *p)
{
    uint64_t fixed;
    int rc = match_table_check(&match_tree_ops, p, &fixed);
    if (rc)
        return rc;
    struct tree *t = calloc(1, sizeof *t);
    if (!t || !(t->roots = match_table_zalloc(fixed))) {
        free(t);
        return -ENOMEM;
    }
    t->size = p->size;
    match_mod_init(&t->mod, p->size);
    t->held = fixed;
    t->budget = p->memory_budget ? p->memory_budget : UINT64_MAX;
    *table = t;
    return 0;
}

static void free_nodes(struct tree_node *n)
{
    while (n) {
        free_nodes(n->left);
        struct tree_node *right = n->right;
        free(n);
        n = right;
    }
}

static void tree_destroy(void *table)
{
    struct tree *t = table;
    if (!t)
        return;
    for (uint64_t i = 0; i < t->size; i++)
        free_nodes(t->roots[i]);
    free(t->roots);
    free(t);
}

static void tree_prefetch(void *table, uint64_t hash)
{
    struct tree *t = table;
    __builtin_prefetch(&t->roots[match_line(&t->mod, hash)]);
}

static int tree_find(void *table, const struct match_key *key, uint64_t hash, int insert,
                     struct match_count **out)
{
    struct tree *t = table;
    struct tree_node **root = &t->roots[match_line(&t->mod, hash)];
    int probes = 0;
    for (struct tree_node *n = *root; n;) {
        probes++;
        int c = match_key_cmp(key, &n->f.key);
        if (!c) {
            *out = &n->f.c;
            return probes;
        }
        n = c < 0 ? n->left : n->right;
    }
    if (!insert)
        return -ENOENT;
    if (t->held + tree_node_bytes > t->budget)
        return -ENOMEM;
    struct tree_node *n = malloc(sizeof *n);
    if (!n)
        return -ENOMEM;
    memset(n, 0, sizeof *n);
    n->f.key = *key;
    n->height = 1;
    if (!*root)
        t->used++;
    *root = avl_insert(*root, n);
    t->held += tree_node_bytes;
    t->flows++;
    *out = &n->f.c;
    return probes ? probes : 1;
}

static int tree_remove(void *table, const struct match_key *key, uint64_t hash)
{
    struct tree *t = table;
    struct tree_node **root = &t->roots[match_line(&t->mod, hash)];
    struct tree_node *gone = NULL;
    *root = avl_remove(*root, key, &gone);
    if (!gone)
        return -ENOENT;
    free(gone);
    if (!*root)
        t->used--;
    t->held -= tree_node_bytes;
    t->flows--;
    return 0;
}

static void walk_nodes(const struct tree_node *n, void (*fn)(const struct match_flow *, void *),
                       void *arg)
{
    for (; n; n = n->right) {
        walk_nodes(n->left, fn, arg);
        fn(&n->f, arg);
    }
}

static void tree_walk(void *table, void (*fn)(const struct match_flow *, void *), void *arg)
{
    struct tree *t = table;
    for (uint64_t i = 0; i < t->size; i++)
        walk_nodes(t->roots[i], fn, arg);
}

static uint64_t tree_flows(const void *table)
{
    return ((const struct tree *)table)->flows;
}
static uint64_t tree_used(const void *table)
{
    return ((const struct tree *)table)->used;
}
static uint64_t tree_memory(const void *table)
{
    return ((const struct tree *)table)->held;
}

const struct match_ops match_tree_ops = {
    .name = "tree",
    .what = "an AVL tree per line (seed 000 trees)",
    .footprint = tree_footprint,
    .create = tree_create,
    .destroy = tree_destroy,
    .prefetch = tree_prefetch,
    .find = tree_find,
    .remove = tree_remove,
    .walk = tree_walk,
    .flows = tree_flows,
    .used_lines = tree_used,
    .memory = tree_memory,
};
