/* symtab.c — the symbol table: the built-in table the ops layer installs, the symbols registered at
 * run time, lookup by id and by name, the symbols core finds by role, and dynamic symbols.
 *
 * Core names no op: the ops layer hands over its table when the library is loaded (th_symtab_install)
 * and each op registered later (th_symtab_register). The built-in table is read without a lock (it is
 * installed before any lookup); the registered symbols are guarded by one mutex, as registration is
 * rare and a lookup of an unknown name takes it briefly. Declared in core/ir.h. */
#include <string.h>
#include <threads.h>

#include "core/ir.h"

/* The qualified names of the symbols of each th_sym_role. */
static const char *const role_names[TH_SYM_ROLE_COUNT] = {
  [TH_SYM_RETURN] = "prims.python_return",      [TH_SYM_DEL] = "prims.python_del",
  [TH_SYM_COMMENT] = "prims.comment",           [TH_SYM_UNPACK_SEQUENCE] = "prims.unpack_sequence",
  [TH_SYM_SHALLOW_COPY] = "prims.shallow_copy",
};

static struct {
  const th_symbol *syms;
  int n;
  void (*prepare)(void);
  th_autocast_fn tag_rule;
  int role_ids[TH_SYM_ROLE_COUNT]; /* -1: none */
} builtins = {NULL, 0, NULL, NULL, {-1, -1, -1, -1, -1}};

static once_flag prepare_once = ONCE_FLAG_INIT;

static void run_prepare(void) {
  if (builtins.prepare) builtins.prepare();
}

/* The built-in table, its schemas parsed. */
static const th_symbol *table(void) {
  call_once(&prepare_once, run_prepare);
  return builtins.syms;
}

void th_symtab_install(const th_symtab_builtins *b) {
  builtins.syms = b->syms;
  builtins.n = b->n;
  builtins.prepare = b->prepare;
  builtins.tag_rule = b->tag_rule;
  for (int r = 0; r < TH_SYM_ROLE_COUNT; r++) {
    builtins.role_ids[r] = -1;
    for (int i = 0; i < b->n; i++)
      if (!strcmp(b->syms[i].qualname, role_names[r])) builtins.role_ids[r] = i;
    TH_ASSERT(builtins.role_ids[r] >= 0);
  }
}

/* ---- registered symbols -------------------------------------------------------------------------- */

static once_flag reg_once = ONCE_FLAG_INIT;
static struct {
  bool ok;
  mtx_t mtx;
  th_symbol **syms;
  int n, cap;
} reg;

static void reg_init(void) { reg.ok = mtx_init(&reg.mtx, mtx_plain) == thrd_success; }

static bool reg_lock(void) {
  call_once(&reg_once, reg_init);
  if (!reg.ok) return false;
  mtx_lock(&reg.mtx);
  return true;
}

static const th_symbol *find_registered_locked(const char *qualname) {
  for (int i = 0; i < reg.n; i++)
    if (!strcmp(reg.syms[i]->qualname, qualname)) return reg.syms[i];
  return NULL;
}

th_status th_symtab_register(th_symbol *s) {
  if (!reg_lock()) return th_error(TH_ERR_NOMEM, "cannot set up the symbol table");
  th_status st = TH_OK;
  if (find_registered_locked(s->qualname)) {
    st = th_error(TH_ERR_VALUE, "op '%s' is already registered", s->qualname);
  } else if (reg.n == reg.cap) {
    int cap = reg.cap ? 2 * reg.cap : 16;
    th_symbol **syms = th_realloc(reg.syms, sizeof(th_symbol *) * (size_t)cap);
    if (!syms)
      st = th_error(TH_ERR_NOMEM, "out of memory registering op '%s'", s->qualname);
    else {
      reg.syms = syms;
      reg.cap = cap;
    }
  }
  if (st == TH_OK) {
    s->id = TH_OP_REGISTERED + reg.n;
    reg.syms[reg.n++] = s;
  }
  mtx_unlock(&reg.mtx);
  return st;
}

static const th_symbol *registered_by_name(const char *qualname) {
  if (!reg_lock()) return NULL;
  const th_symbol *s = find_registered_locked(qualname);
  mtx_unlock(&reg.mtx);
  return s;
}

static const th_symbol *registered_by_id(th_op_id id) {
  long k = (long)id - (long)TH_OP_REGISTERED;
  if (k < 0 || !reg_lock()) return NULL;
  const th_symbol *s = k < reg.n ? reg.syms[k] : NULL;
  mtx_unlock(&reg.mtx);
  return s;
}

/* ---- lookup ----------------------------------------------------------------------------------------- */

const th_symbol *th_symbol_get(th_op_id id) {
  if (id >= TH_OP_REGISTERED) return registered_by_id(id);
  if (id < 0 || id >= builtins.n) return NULL;
  return &table()[id];
}

static bool alias_matches(const char *aliases, const char *name) {
  size_t n = strlen(name);
  for (const char *p = aliases; p && *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return true;
    p = bar ? bar + 1 : NULL;
  }
  return false;
}

const th_symbol *th_symbol_lookup(const char *name) {
  const th_symbol *t = table();
  const th_symbol *bare_prim = NULL;
  for (int i = 0; i < builtins.n; i++) {
    const th_symbol *s = &t[i];
    if (!strcmp(s->qualname, name)) return s;
    if (!strcmp(s->name, name)) {
      if (!s->is_prim) return s;
      bare_prim = s;
    }
  }
  for (int i = 0; i < builtins.n; i++)
    if (t[i].aliases && alias_matches(t[i].aliases, name)) return &t[i];
  if (bare_prim) return bare_prim;
  return strchr(name, '.') ? registered_by_name(name) : NULL; /* registered ops: qualified names only */
}

const th_symbol *th_symbol_by_role(th_sym_role role) {
  int id = (unsigned)role < TH_SYM_ROLE_COUNT ? builtins.role_ids[role] : -1;
  return id >= 0 ? &table()[id] : NULL;
}

bool th_symbol_has_role(const th_symbol *sym, th_sym_role role) {
  return sym && (unsigned)role < TH_SYM_ROLE_COUNT && builtins.role_ids[role] >= 0 &&
         sym->id == builtins.role_ids[role];
}

bool th_bsym_has_role(const th_bsym *b, th_sym_role role) { return b && th_symbol_has_role(b->sym, role); }

th_autocast_fn th_autocast_rule(const th_symbol *sym) {
  if (sym->autocast) return sym->autocast;
  if (sym->tags & (TH_TAG_AC_LOWER | TH_TAG_AC_FP32 | TH_TAG_AC_PROMOTE | TH_TAG_AC_FP32_CUDA))
    return builtins.tag_rule;
  return NULL;
}

th_symbol *th_symbol_new_dynamic(th_trace *tr, const char *name) {
  th_symbol *s = th_arena_alloc(tr->arena, sizeof *s);
  if (!s) return NULL;
  s->id = TH_OP_DYNAMIC;
  s->name = s->qualname = th_arena_strdup(tr->arena, name);
  s->schema_text = "";
  s->schema.ret = TH_RT_ANY;
  return s->name ? s : NULL;
}
