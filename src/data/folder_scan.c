/* folder_scan.c — the file list of an image-folder dataset (folder.h):
 * classes are the sorted names of DIR's subfolders (or of DIR/train's when
 * DIR holds train/ and val/, or train/ and test/), images the .jpg/.jpeg/.png
 * files directly in each class folder. Samples are ordered by file name,
 * then class, so a dataset written as <class>/<index>.png keeps the order of
 * its source arrays. Without those the held-out part is each class's
 * proportional share, evenly spaced (mp_split_mark). Hidden entries (".name")
 * are ignored; other files in the class folders are ignored and counted. */
#include "data/folder.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/input_file.h"

#define FOLDER_MAX_FILES (1 << 28)

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *join(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

/* Sorted names of the entries of dir that are folders (want_dirs) or image
 * files; with other non-NULL (image files wanted), the regular files that
 * are not images are counted there and the path of the first of them by
 * name (not by the folder's order, which differs between file systems) kept
 * in *other_path. An entry that cannot be stat()ed is an error among
 * folders (dropped unsaid, it would shift every later class's label) and,
 * named as an image, listed: reading it fails, so it is a bad image. */
static mp_status list_dir(const char *dir, bool want_dirs, char ***names, int *n, int *other, char **other_path) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return mp_error(MP_ERR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
    int cap = 0;
    mp_status s = MP_OK;
    for (struct dirent *e; s == MP_OK && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *full = join(dir, e->d_name);
        if (!full) {
            s = mp_error(MP_ERR_NOMEM, "%s: out of memory listing the folder", dir);
            break;
        }
        struct stat st, ln;
        const bool stat_ok = stat(full, &st) == 0;
        const int err = errno;
        if (!stat_ok && err == ENOENT && lstat(full, &ln) != 0) { /* removed since readdir: not an entry now */
            free(full);
            continue;
        }
        if (!stat_ok && want_dirs) {
            s = mp_path_error(full, err, "stat");
            free(full);
            break;
        }
        const bool is_file = !want_dirs && stat_ok && S_ISREG(st.st_mode);
        const bool ok = want_dirs ? S_ISDIR(st.st_mode) : (is_file || !stat_ok) && is_image_name(e->d_name);
        if (!ok && is_file && other) {
            ++*other;
            if (!*other_path || strcmp(full, *other_path) < 0) free(*other_path), *other_path = full, full = NULL;
        }
        free(full);
        if (!ok) continue;
        if (*n >= FOLDER_MAX_FILES) {
            s = mp_error(MP_ERR_INVALID_ARG, "%s: more than %d entries", dir, FOLDER_MAX_FILES);
            break;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            if (!nn) {
                s = mp_error(MP_ERR_NOMEM, "%s: out of memory listing the folder", dir);
                break;
            }
            *names = nn;
        }
        if (!((*names)[*n] = strdup(e->d_name))) s = mp_error(MP_ERR_NOMEM, "%s: out of memory", dir);
        else ++*n;
    }
    closedir(d);
    if (s == MP_OK && *n) qsort(*names, (size_t)*n, sizeof **names, cmp_str);
    if (s != MP_OK) {
        for (int i = 0; i < *n; i++) free((*names)[i]);
        free(*names);
        *names = NULL;
        *n = 0;
    }
    return s;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

typedef struct {
    char *path;
    const char *base; /* inside path */
    int label;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    const int c = strcmp(x->base, y->base);
    return c ? c : (x->label > y->label) - (x->label < y->label);
}

/* Every image of root/<class>/ for the given classes, ordered by file name
 * then class; the other files there counted into *other (first path by name
 * in *other_path, as list_dir). */
static mp_status collect(const char *root, char **classes, int n_classes, bool need_class_dirs, entry **out, int *n,
                         int *other, char **other_path) {
    *out = NULL;
    *n = 0;
    int cap = 0;
    mp_status s = MP_OK;
    for (int k = 0; s == MP_OK && k < n_classes; k++) {
        char *cdir = join(root, classes[k]);
        if (!cdir) return mp_error(MP_ERR_NOMEM, "%s: out of memory", root);
        if (!is_dir(cdir)) {
            if (need_class_dirs) s = mp_error(MP_ERR_FORMAT, "%s: class folder missing", cdir);
            free(cdir);
            continue;
        }
        char **files;
        int nf;
        s = list_dir(cdir, false, &files, &nf, other, other_path);
        for (int i = 0; s == MP_OK && i < nf; i++) {
            if (*n >= FOLDER_MAX_FILES) {
                s = mp_error(MP_ERR_INVALID_ARG, "%s: more than %d images", root, FOLDER_MAX_FILES);
                break;
            }
            if (*n == cap) {
                cap = cap ? 2 * cap : 256;
                entry *ne = realloc(*out, (size_t)cap * sizeof *ne);
                if (!ne) {
                    s = mp_error(MP_ERR_NOMEM, "%s: out of memory listing images", root);
                    break;
                }
                *out = ne;
            }
            char *p = join(cdir, files[i]);
            if (!p) {
                s = mp_error(MP_ERR_NOMEM, "%s: out of memory", root);
                break;
            }
            (*out)[(*n)++] = (entry){.path = p, .base = p + strlen(cdir) + 1, .label = k};
        }
        if (s == MP_OK) free_names(files, nf);
        else if (files) free_names(files, nf);
        free(cdir);
    }
    if (s == MP_OK && *n) qsort(*out, (size_t)*n, sizeof **out, cmp_entry);
    return s;
}

static void free_entries(entry *e, int n) {
    for (int i = 0; i < n; i++) free(e[i].path);
    free(e);
}

/* entries -> a part's file list (paths moved). */
static mp_status to_part(entry *e, int n, const bool *take, bool want, mp_folder_part *part) {
    int count = 0;
    for (int i = 0; i < n; i++) count += !take || take[i] == want;
    part->paths = calloc((size_t)count + 1, sizeof *part->paths);
    part->labels = calloc((size_t)count + 1, sizeof *part->labels);
    if (!part->paths || !part->labels) return mp_error(MP_ERR_NOMEM, "folder: out of memory");
    for (int i = 0; i < n; i++) {
        if (take && take[i] != want) continue;
        part->paths[part->n] = e[i].path;
        part->labels[part->n++] = e[i].label;
        e[i].path = NULL;
    }
    return MP_OK;
}

void mp_folder_list_free(mp_folder_list *l) {
    free_names(l->classes, l->n_classes);
    free(l->train.other_example), free(l->val.other_example);
    for (int k = 0; k < 2; k++) {
        mp_folder_part *p = k ? &l->val : &l->train;
        for (int i = 0; i < p->n; i++) free(p->paths[i]);
        free(p->paths);
        free(p->labels);
    }
    memset(l, 0, sizeof *l);
}

mp_status mp_folder_scan(const char *dir, double val_fraction, mp_folder_list *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) != 0)
        return mp_error(MP_ERR_IO, "%s: %s", dir, errno == ENOENT ? "not found" : strerror(errno));
    if (!S_ISDIR(st.st_mode)) return mp_error(MP_ERR_IO, "%s: not a folder (folder:DIR wants DIR/<class>/<image>)", dir);
    char *tdir = join(dir, "train"), *vdir = join(dir, "val");
    const bool test_dir = vdir && !is_dir(vdir);
    if (test_dir) { /* DIR/test/ where DIR/val/ is not */
        free(vdir);
        vdir = join(dir, "test");
    }
    if (!tdir || !vdir) {
        free(tdir), free(vdir);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", dir);
    }
    const bool split_dirs = is_dir(tdir) && is_dir(vdir);
    const char *root = split_dirs ? tdir : dir;
    mp_status s = list_dir(root, true, &out->classes, &out->n_classes, NULL, NULL);
    if (s == MP_OK && out->n_classes == 0)
        s = mp_error(MP_ERR_FORMAT, "%s: no class subfolders (expected %s/<class>/<image>.jpg|png)", root, root);
    if (s == MP_OK && out->n_classes > MP_DATASET_MAX_CLASSES)
        s = mp_error(MP_ERR_FORMAT, "%s: %d class subfolders, at most %d", root, out->n_classes, MP_DATASET_MAX_CLASSES);
    entry *all = NULL, *vall = NULL;
    int n = 0, nv = 0;
    if (s == MP_OK)
        s = collect(root, out->classes, out->n_classes, true, &all, &n, &out->train.other_files,
                    &out->train.other_example);
    if (s == MP_OK && n == 0)
        s = mp_error(MP_ERR_FORMAT, "%s: no images (.jpg, .jpeg, .png) in its %d class subfolders%s", root,
                     out->n_classes, !split_dirs && is_dir(tdir) ? " (its train/ is read as the training part only "
                     "with a val/ or test/ beside it)" : "");
    if (s == MP_OK && split_dirs) {
        char **vclasses;
        int nvc;
        s = list_dir(vdir, true, &vclasses, &nvc, NULL, NULL);
        for (int i = 0; s == MP_OK && i < nvc; i++)
            if (!bsearch(&vclasses[i], out->classes, (size_t)out->n_classes, sizeof *out->classes, cmp_str))
                s = mp_error(MP_ERR_FORMAT, "%s/%s: a validation class that %s does not have", vdir, vclasses[i], tdir);
        if (s == MP_OK || vclasses) free_names(vclasses, nvc);
        if (s == MP_OK)
            s = collect(vdir, out->classes, out->n_classes, false, &vall, &nv, &out->val.other_files,
                        &out->val.other_example);
        if (s == MP_OK && nv == 0) s = mp_error(MP_ERR_FORMAT, "%s: no images in its class subfolders", vdir);
        if (s == MP_OK) s = to_part(all, n, NULL, true, &out->train);
        if (s == MP_OK) s = to_part(vall, nv, NULL, true, &out->val);
    } else if (s == MP_OK) {
        bool *take = malloc((size_t)n);
        int32_t *labels = malloc((size_t)n * sizeof *labels);
        if (!take || !labels) s = mp_error(MP_ERR_NOMEM, "%s: out of memory", dir);
        for (int i = 0; s == MP_OK && i < n; i++) labels[i] = all[i].label;
        const int held = s == MP_OK && val_fraction > 0 && val_fraction < 1
                             ? mp_split_mark(labels, n, out->n_classes, val_fraction, take) : 0;
        if (held < 0) s = MP_ERR_NOMEM;
        else if (s == MP_OK && (held < 1 || held >= n))
            s = mp_error(MP_ERR_INVALID_ARG, "%s: --val-fraction %g of %d images leaves %d for training and %d held "
                         "out (no train/ with val/ or test/; a class's last image is never held out): each part "
                         "needs at least one", dir, val_fraction, n, n - held, held);
        free(labels);
        if (s == MP_OK) s = to_part(all, n, take, false, &out->train);
        if (s == MP_OK) s = to_part(all, n, take, true, &out->val);
        free(take);
        out->val.other_files = out->train.other_files; /* both parts come from the same class folders */
        if (s == MP_OK && out->train.other_example && !(out->val.other_example = strdup(out->train.other_example)))
            s = mp_error(MP_ERR_NOMEM, "%s: out of memory", dir);
    }
    out->split_dirs = split_dirs;
    out->test_dir = split_dirs && test_dir;
    free_entries(all, n);
    free_entries(vall, nv);
    free(tdir), free(vdir);
    if (s != MP_OK) mp_folder_list_free(out);
    return s;
}
