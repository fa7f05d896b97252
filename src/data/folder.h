/* folder.h — image-folder datasets (mp_dataset_open_folder): the file list
 * (folder_scan.c) and the dataset over it (folder.c), decoded once into
 * memory when it fits under a memory cap, else decoded per batch by the
 * loader's workers through a sample source. */
#ifndef MP_DATA_FOLDER_H
#define MP_DATA_FOLDER_H

#include <stdbool.h>

#include "data/dataset.h"

typedef struct {
    char **paths;  /* n files */
    int *labels;   /* n class indices */
    int n;
    int other_files;     /* regular files in its class folders that are not .jpg/.jpeg/.png (ignored) */
    char *other_example; /* the first of them by path, or NULL */
} mp_folder_part;

typedef struct {
    char **classes;          /* sorted class names */
    int n_classes;
    mp_folder_part train, val;
    bool split_dirs;         /* from DIR/train and DIR/val (or DIR/test), not by fraction */
    bool test_dir;           /* split_dirs with DIR/test */
} mp_folder_list;

/* List DIR's classes and images and split them (see folder_scan.c). Errors
 * name the folder: not found, not a folder, no class subfolders, no images,
 * a val/ class that train/ lacks, a fraction leaving a part empty. */
mp_status mp_folder_scan(const char *dir, double val_fraction, mp_folder_list *out);
void mp_folder_list_free(mp_folder_list *l);

/* Both parts of an image folder as datasets (mp_dataset_open_folder). */
mp_status mp_dataset_load_folder(const char *dir, const mp_folder_opts *o, mp_dataset *train, mp_dataset *val);

#endif
