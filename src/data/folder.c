/* folder.c — image-folder datasets over the file list of folder_scan.c.
 *
 * Opening reads every image's header on the decoder threads (format, size,
 * channels; a file that is not a readable JPEG/PNG is bad), fixes the
 * sample geometry (the given size, else the images' common size; the given
 * channels, else RGB when any image has colour) and then either decodes
 * every image once into memory — when the decoded set of both parts fits
 * under mp_folder_opts.max_memory — or leaves the decoding to the loader's
 * workers through a sample source (each fetch reads, decodes, converts and
 * resamples one file). Bad images are left out (skip) or end the open with
 * an error naming the file (fail); in the per-batch path an image whose
 * data turns out corrupt only when it is decoded is an error of the loader
 * under fail and, under skip, replaced or left out by the loader
 * (mp_sample_source.replace_bad). */
#include "data/folder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "data/decode_pool.h"
#include "data/image_decode.h"
#include "data/image_resize.h"

#define FOLDER_DEFAULT_MEMORY ((size_t)2 << 30)
#define FOLDER_MAX_SAMPLE (1 << 26) /* values per sample */

/* One file -> (c, h, w) floats: decoded to c channels, the box (centre, or
 * random-resized from rrc) resampled to h x w. */
static mp_status decode_sample(const char *path, int c, int h, int w, mp_rng *rrc, float *dst) {
    unsigned char *buf;
    size_t len;
    MP_TRY(mp_image_read_file(path, &buf, &len));
    mp_image im;
    mp_status s = mp_image_decode(buf, len, path, c, &im);
    free(buf);
    if (s != MP_OK) return s;
    if (!rrc && im.h == h && im.w == w) { /* the sample size already: straight into dst */
        mp_image_to_planar(im.pixels, h, w, c, dst);
        mp_image_free(&im);
        return MP_OK;
    }
    float *planar = malloc((size_t)im.w * im.h * (size_t)c * sizeof *planar);
    if (!planar) {
        mp_image_free(&im);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    }
    mp_image_to_planar(im.pixels, im.h, im.w, c, planar);
    const mp_box b = rrc ? mp_box_random_resized(rrc, im.h, im.w) : mp_box_centre(im.h, im.w, h, w);
    s = mp_resample_bilinear(planar, c, im.h, im.w, b, dst, h, w);
    free(planar);
    mp_image_free(&im);
    return s;
}

/* ---- the per-batch path ----------------------------------------------------- */

typedef struct {
    mp_sample_source base;
    char **paths; /* n, owned */
    int n, c, h, w;
} folder_source;

static mp_status source_fetch(mp_sample_source *s, int i, mp_rng *rrc, float *dst) {
    folder_source *f = (folder_source *)s;
    if (i < 0 || i >= f->n) return mp_error(MP_ERR_INTERNAL, "folder: sample %d of %d", i, f->n);
    return decode_sample(f->paths[i], f->c, f->h, f->w, rrc, dst); /* skip: the loader replaces it (replace_bad) */
}

static void source_destroy(mp_sample_source *s) {
    folder_source *f = (folder_source *)s;
    for (int i = 0; i < f->n; i++) free(f->paths[i]);
    free(f->paths);
    free(f);
}

/* ---- opening ------------------------------------------------------------------ */

typedef struct {
    char **paths;            /* both parts: train then val */
    int n;
    mp_image_info *info;     /* (n) */
    bool *bad;               /* (n) */
    char (*why)[320];        /* (n): the first error message per bad file */
    int c, h, w;
    float *images;           // (n, c, h, w) when decoded once
} open_job;

static void note_bad(open_job *j, int i) {
    j->bad[i] = true;
    snprintf(j->why[i], sizeof j->why[i], "%s", mp_last_error());
}

static mp_status probe_one(void *arg, int i, int worker) {
    (void)worker;
    open_job *j = arg;
    unsigned char *buf;
    size_t len;
    mp_status s = mp_image_read_file(j->paths[i], &buf, &len);
    if (s == MP_OK) s = mp_image_probe(buf, len, j->paths[i], &j->info[i]);
    free(buf); /* NULL when the read failed */
    if (s != MP_OK) note_bad(j, i);
    return MP_OK;
}

static mp_status decode_one(void *arg, int i, int worker) {
    (void)worker;
    open_job *j = arg;
    if (j->bad[i]) return MP_OK;
    const size_t per = (size_t)j->c * j->h * j->w;
    if (decode_sample(j->paths[i], j->c, j->h, j->w, NULL, j->images + (size_t)i * per) != MP_OK) note_bad(j, i);
    return MP_OK;
}

/* The first bad file as the error (fail), or MP_OK (skip). */
static mp_status check_bad(const open_job *j, mp_bad_images policy) {
    if (policy == MP_BAD_IMAGES_SKIP) return MP_OK;
    for (int i = 0; i < j->n; i++)
        if (j->bad[i])
            return mp_error(MP_ERR_FORMAT, "%s (--bad-images skip leaves such images out)", j->why[i]);
    return MP_OK;
}

/* Sample geometry from the options and the good images' headers. */
static mp_status pick_geometry(const char *dir, const mp_folder_opts *o, open_job *j) {
    int first = -1;
    bool colour = false;
    for (int i = 0; i < j->n; i++) {
        if (j->bad[i]) continue;
        if (first < 0) first = i;
        colour = colour || j->info[i].channels == 3;
    }
    if (first < 0) return mp_error(MP_ERR_FORMAT, "%s: no image could be read (all %d are bad)", dir, j->n);
    j->c = o->channels ? o->channels : colour ? 3 : 1;
    j->h = o->height, j->w = o->width;
    if (!j->h) {
        j->h = j->info[first].h, j->w = j->info[first].w;
        for (int i = first + 1; i < j->n; i++)
            if (!j->bad[i] && (j->info[i].h != j->h || j->info[i].w != j->w))
                return mp_error(MP_ERR_FORMAT, "%s: images differ in size (%s is %dx%d, %s is %dx%d): give the "
                                "sample size (--image-size HxW)", dir, j->paths[first], j->h, j->w, j->paths[i],
                                j->info[i].h, j->info[i].w);
    }
    if ((long long)j->c * j->h * j->w > FOLDER_MAX_SAMPLE)
        return mp_error(MP_ERR_INVALID_ARG, "%s: samples of %dx%dx%d are too large", dir, j->c, j->h, j->w);
    return MP_OK;
}

/* Whether `count` decoded samples (of the `part` named, or all) fit in the
 * host's memory (core/host_mem.h), with the error naming the folder and size. */
static mp_status check_decoded_fits(const open_job *j, const mp_folder_opts *o, int count, const char *part,
                                    const char *dir) {
    char size[64] = "";
    if (o->height) snprintf(size, sizeof size, ", --image-size %dx%d", o->height, o->width);
    return mp_host_mem_check((size_t)count * j->c * j->h * j->w * sizeof(float),
                             "a lower --decode-memory-mb decodes them per batch",
                             "the %d %s%simages of %s decoded in memory (%dx%dx%d each%s)", count, part,
                             *part ? " " : "", dir, j->c, j->h, j->w, size);
}

/* Whether the host can hold n decoded samples of per floats twice over: the
 * job decodes them all, then each part copies its own before the job's are
 * freed. Where it cannot, the images are decoded per batch instead, as with a
 * lower --decode-memory-mb. */
static bool decoded_fits(int n, size_t per) {
    mp_host_mem m;
    return !mp_host_mem_available(&m) || 2.0 * n * (double)per * sizeof(float) <= (double)m.bytes;
}

static mp_class_names *make_names(char **classes, int n) {
    mp_class_names *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->refs = 1;
    c->names = calloc((size_t)n + 1, sizeof *c->names);
    if (!c->names) {
        free(c);
        return NULL;
    }
    for (int i = 0; i < n; i++) c->names[i] = classes[i], classes[i] = NULL; /* moved */
    c->n = n;
    return c;
}

/* Part [at, at + n) of the job as a dataset: the good images, in order;
 * the files of its class folders that are not images (part's count) in
 * ignored_files and its description. */
static mp_status make_part(open_job *j, int at, int n, const int *labels, bool decoded, const mp_folder_opts *o,
                           mp_class_names *names, int classes, const char *dir, const char *what,
                           const mp_folder_part *part, mp_dataset *out) {
    memset(out, 0, sizeof *out);
    const size_t per = (size_t)j->c * j->h * j->w;
    int good = 0;
    for (int i = at; i < at + n; i++) good += !j->bad[i];
    if (good == 0) return mp_error(MP_ERR_FORMAT, "%s: the %s part has no readable images", dir, what);
    if (decoded) MP_TRY(check_decoded_fits(j, o, good, what, dir));
    *out = (mp_dataset){.n = good, .c = j->c, .h = j->h, .w = j->w, .classes = classes, .skipped = n - good};
    out->labels = malloc((size_t)good * sizeof *out->labels);
    folder_source *src = decoded ? NULL : calloc(1, sizeof *src);
    if (src) src->paths = calloc((size_t)good, sizeof *src->paths);
    if (decoded) out->images = malloc((size_t)good * per * sizeof *out->images);
    if (!out->labels || (decoded ? !out->images : !src || !src->paths)) {
        if (src) free(src->paths);
        free(src);
        mp_dataset_free(out);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory for %d samples", dir, good);
    }
    int k = 0;
    for (int i = at; i < at + n; i++) {
        if (j->bad[i]) continue;
        out->labels[k] = labels[i - at];
        if (decoded) memcpy(out->images + (size_t)k * per, j->images + (size_t)i * per, per * sizeof(float));
        else src->paths[k] = j->paths[i], j->paths[i] = NULL; /* moved */
        k++;
    }
    if (src) {
        *src = (folder_source){.base = {.fetch = source_fetch, .destroy = source_destroy, .refs = 1,
                                        .replace_bad = o->bad_images == MP_BAD_IMAGES_SKIP},
                               .paths = src->paths, .n = good, .c = j->c, .h = j->h, .w = j->w};
        out->src = &src->base;
    }
    out->names = mp_class_names_retain(names);
    char ignored[200] = ""; /* e.g. .bmp or .webp files, which would otherwise vanish from the data unsaid */
    out->ignored_files = part->other_files;
    if (part->other_files) {
        const char *ex = part->other_example ? part->other_example : "";
        const size_t dl = strlen(dir);
        if (!strncmp(ex, dir, dl) && ex[dl] == '/') ex += dl + 1;
        snprintf(ignored, sizeof ignored, ", %d file%s not .jpg/.jpeg/.png ignored (e.g. %s)", part->other_files,
                 part->other_files == 1 ? "" : "s", ex);
    }
    mp_dataset_set_source(out, "%s (%s: %d images%s, %d classes%s, %s)", dir, what, good,
                          good < n ? " after skipping bad ones" : "", classes, ignored,
                          decoded ? "decoded in memory" : "decoded per batch");
    return MP_OK;
}

static void job_free(open_job *j) {
    free(j->paths); /* the strings belong to the list or the sources */
    free(j->info);
    free(j->bad);
    free(j->why);
    free(j->images);
}

mp_status mp_dataset_load_folder(const char *dir, const mp_folder_opts *opts, mp_dataset *train, mp_dataset *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    mp_folder_opts o = opts ? *opts : (mp_folder_opts){0};
    if (o.channels != 0 && o.channels != 1 && o.channels != 3)
        return mp_error(MP_ERR_INVALID_ARG, "%s: channels %d (1 or 3)", dir, o.channels);
    if (o.height < 0 || o.width < 0 || (o.height == 0) != (o.width == 0) || o.height > MP_IMAGE_MAX_SIDE ||
        o.width > MP_IMAGE_MAX_SIDE)
        return mp_error(MP_ERR_INVALID_ARG, "%s: sample size %dx%d (both 1..%d, or both 0)", dir, o.height, o.width,
                        MP_IMAGE_MAX_SIDE);
    if (o.bad_images != MP_BAD_IMAGES_FAIL && o.bad_images != MP_BAD_IMAGES_SKIP)
        return mp_error(MP_ERR_INVALID_ARG, "%s: unknown bad_images policy %d", dir, (int)o.bad_images);
    if (o.val_fraction == 0) o.val_fraction = 0.1;
    if (!o.max_memory) o.max_memory = FOLDER_DEFAULT_MEMORY;
    mp_folder_list list;
    MP_TRY(mp_folder_scan(dir, o.val_fraction, &list));
    const int nt = list.train.n, nv = list.val.n;
    open_job j = {.n = nt + nv};
    j.paths = malloc((size_t)j.n * sizeof *j.paths);
    j.info = calloc((size_t)j.n, sizeof *j.info);
    j.bad = calloc((size_t)j.n, sizeof *j.bad);
    j.why = calloc((size_t)j.n, sizeof *j.why);
    mp_pool *pool = NULL;
    mp_class_names *names = NULL;
    mp_status s = j.paths && j.info && j.bad && j.why ? MP_OK : mp_error(MP_ERR_NOMEM, "%s: out of memory", dir);
    if (s == MP_OK) {
        memcpy(j.paths, list.train.paths, (size_t)nt * sizeof *j.paths);
        memcpy(j.paths + nt, list.val.paths, (size_t)nv * sizeof *j.paths);
        s = mp_pool_create(o.threads > 0 ? o.threads : mp_online_cpus(), &pool);
    }
    if (s == MP_OK) s = mp_pool_run(pool, j.n, probe_one, &j);
    if (s == MP_OK) s = check_bad(&j, o.bad_images);
    if (s == MP_OK) s = pick_geometry(dir, &o, &j);
    const size_t per = (size_t)j.c * j.h * j.w;
    const bool decoded = !o.lazy && per && (double)j.n * (double)per * sizeof(float) <= (double)o.max_memory &&
                         decoded_fits(j.n, per);
    if (s == MP_OK && decoded) {
        j.images = malloc((size_t)j.n * per * sizeof *j.images);
        if (s == MP_OK)
            s = j.images ? mp_pool_run(pool, j.n, decode_one, &j) : mp_error(MP_ERR_NOMEM, "%s: out of memory", dir);
        if (s == MP_OK) s = check_bad(&j, o.bad_images);
    }
    if (s == MP_OK && !(names = make_names(list.classes, list.n_classes)))
        s = mp_error(MP_ERR_NOMEM, "%s: out of memory", dir);
    /* the paths now belong to the job (moved into the lazy sources, freed below otherwise) */
    if (s == MP_OK) {
        for (int i = 0; i < nt; i++) list.train.paths[i] = NULL;
        for (int i = 0; i < nv; i++) list.val.paths[i] = NULL;
        s = make_part(&j, 0, nt, list.train.labels, decoded, &o, names, list.n_classes, dir,
                      list.split_dirs ? "train/" : "train", &list.train, train);
        if (s == MP_OK)
            s = make_part(&j, nt, nv, list.val.labels, decoded, &o, names, list.n_classes, dir,
                          list.test_dir ? "test/" : list.split_dirs ? "val/" : "held out", &list.val, val);
        for (int i = 0; i < j.n; i++) free(j.paths[i]); /* those not moved */
    }
    mp_class_names_release(names);
    mp_pool_destroy(pool);
    job_free(&j);
    mp_folder_list_free(&list);
    if (s != MP_OK) {
        mp_dataset_free(train);
        mp_dataset_free(val);
    }
    return s;
}
