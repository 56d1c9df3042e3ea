/* base/list.h - intrusive doubly linked list (kernel style). */
#ifndef MC_BASE_LIST_H
#define MC_BASE_LIST_H

#include <stdbool.h>

#include "base/compiler.h"

struct mc_list {
	struct mc_list *next;
	struct mc_list *prev;
};

#define MC_LIST_INIT(name)       \
	{                        \
		&(name), &(name) \
	}

static inline void mc_list_init(struct mc_list *l)
{
	l->next = l;
	l->prev = l;
}

static inline bool mc_list_empty(const struct mc_list *l)
{
	return l->next == l;
}

static inline void mc_list_insert_between(struct mc_list *n, struct mc_list *prev,
					  struct mc_list *next)
{
	n->next = next;
	n->prev = prev;
	prev->next = n;
	next->prev = n;
}

static inline void mc_list_add_tail(struct mc_list *head, struct mc_list *n)
{
	mc_list_insert_between(n, head->prev, head);
}

static inline void mc_list_add_head(struct mc_list *head, struct mc_list *n)
{
	mc_list_insert_between(n, head, head->next);
}

static inline void mc_list_del(struct mc_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n;
	n->prev = n;
}

/* Move every node of src to the tail of dst; src becomes empty. */
static inline void mc_list_splice_tail(struct mc_list *dst, struct mc_list *src)
{
	if (mc_list_empty(src))
		return;
	src->next->prev = dst->prev;
	dst->prev->next = src->next;
	src->prev->next = dst;
	dst->prev = src->prev;
	mc_list_init(src);
}

#define mc_list_entry(ptr, type, member)  mc_container_of(ptr, type, member)
#define mc_list_first(head, type, member) mc_list_entry((head)->next, type, member)

#define mc_list_for_each(pos, head)	  for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
#define mc_list_for_each_safe(pos, tmp, head)                            \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif
