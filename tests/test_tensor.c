/* Tensors, shapes, buffers and the buffer cache. */
#include "tests/testutil.h"

static void test_shapes(void) {
    psg_shape_t a = psg_shape_2d(3, 4), b = psg_shape_1d(4), o;
    CHECK(psg_shape_numel(&a) == 12);
    CHECK(psg_shape_broadcast(&a, &b, &o) == 0 && psg_shape_equal(&o, &a));
    psg_shape_t c = psg_shape_1d(5);
    CHECK(psg_shape_broadcast(&a, &c, &o) < 0);
    CHECK_ERROR_HAS("cannot broadcast");
    char buf[PSG_SHAPE_STR_MAX];
    psg_shape_t u = psg_shape_2d(-1, 10);
    CHECK(strcmp(psg_shape_str(&u, buf, sizeof buf), "[?, 10]") == 0);
    CHECK(!psg_shape_is_complete(&u));
    CHECK(psg_shape_compatible(&u, &(psg_shape_t){2, {7, 10}}));
    CHECK(!psg_shape_compatible(&u, &(psg_shape_t){2, {7, 11}}));
}

static void test_tensor_lifetime(void) {
    psg_shape_t s = psg_shape_2d(2, 3);
    psg_tensor_t *t = psg_tensor_zeros(PSG_DT_F32, &s);
    CHECK(t && psg_tensor_nbytes(t) == 24);
    CHECK(((uintptr_t)t->data % 64) == 0);
    psg_tensor_t *r = psg_tensor_reshaped(t, &(psg_shape_t){1, {6}});
    CHECK(r && r->data == t->data);
    psg_tensor_f32(t)[5] = 7;
    CHECK(psg_tensor_f32(r)[5] == 7);
    CHECK(psg_tensor_reshaped(t, &(psg_shape_t){1, {7}}) == NULL);
    CHECK_ERROR_HAS("cannot reshape");
    psg_tensor_destroy(&t);
    CHECK(t == NULL);
    CHECK(psg_tensor_f32(r)[5] == 7); /* still alive through r */
    psg_tensor_destroy(&r);
    psg_tensor_destroy(&r); /* NULL-safe */
    CHECK(psg_tensor_new(PSG_DT_F32, &(psg_shape_t){1, {-1}}) == NULL);
    CHECK_ERROR_HAS("not complete");
}

static int freed;
static void count_free(void *data, void *hint) {
    (void)data;
    (void)hint;
    freed++;
}

static void test_wrapped_buffer(void) {
    static float external[4] = {1, 2, 3, 4};
    psg_buffer_t *b = psg_buffer_wrap(external, sizeof external, count_free, NULL);
    psg_tensor_t *t = psg_tensor_from_buffer(PSG_DT_F32, &(psg_shape_t){1, {4}}, b, 0);
    psg_buffer_unref(&b);
    CHECK(freed == 0 && psg_tensor_f32(t)[3] == 4);
    CHECK(psg_tensor_from_buffer(PSG_DT_F32, &(psg_shape_t){1, {5}}, t->buf, 0) == NULL);
    psg_tensor_destroy(&t);
    CHECK(freed == 1);
}

static void test_cache_reuse(void) {
    psg_shape_t s = psg_shape_1d(1 << 20);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &s);
    void *first = t->data;
    psg_tensor_destroy(&t);
    size_t cached = psg_buffer_cached_bytes();
    CHECK(cached >= (size_t)4 << 20);
    t = psg_tensor_new(PSG_DT_F32, &s);
    CHECK(t->data == first); /* the same block came back */
    psg_tensor_destroy(&t);
    psg_buffer_cache_trim();
    CHECK(psg_buffer_cached_bytes() == 0);
}

/* A mapped block serves a later request of up to half its size: the layers of a
 * convolutional net at a large batch each have their own size, and exact sizes alone left
 * the cache full of blocks no run asked for again (Inception-v3 served at batch 32: 2.4 M
 * page faults in 7 runs, 320 K with this). Not a request under half of it, nor a small
 * block (malloc'd: exact buckets only). */
static void test_cache_serves_smaller_sizes(void) {
    psg_buffer_cache_trim();
    psg_buffer_t *big = psg_buffer_new((size_t)3 << 20);
    CHECK(big != NULL);
    void *data = big->data;
    psg_buffer_unref(&big);
    psg_buffer_t *half = psg_buffer_new((size_t)1 << 20); /* a third: not this block */
    CHECK(half != NULL && half->data != data);
    psg_buffer_t *two = psg_buffer_new((size_t)2 << 20);
    CHECK(two != NULL && two->data == data && two->size == (size_t)2 << 20);
    psg_buffer_unref(&two);
    psg_buffer_unref(&half);
    psg_buffer_t *small = psg_buffer_new(100000);
    CHECK(small != NULL);
    data = small->data;
    psg_buffer_unref(&small);
    psg_buffer_t *smaller = psg_buffer_new(60000);
    CHECK(smaller != NULL && smaller->data != data);
    psg_buffer_unref(&smaller);
    psg_buffer_cache_trim();
    CHECK(psg_buffer_cached_bytes() == 0);
}

/* Rows of parts joined in order: a (1 x 3) then b (2 x 3). */
static void test_concat_rows(void) {
    psg_tensor_t *a = psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){2, {1, 3}},
                                           (float[]){1, 2, 3}, 3 * sizeof(float));
    psg_tensor_t *b = psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){2, {2, 3}},
                                           (float[]){4, 5, 6, 7, 8, 9}, 6 * sizeof(float));
    psg_tensor_t *t = psg_tensor_concat_rows((psg_tensor_t *[]){a, b}, 2);
    CHECK(t && psg_shape_equal(&t->shape, &(psg_shape_t){2, {3, 3}}));
    for (int i = 0; t && i < 9; i++) CHECK(psg_tensor_f32(t)[i] == (float)(i + 1));
    psg_tensor_destroy(&t);
    psg_tensor_destroy(&a);
    psg_tensor_destroy(&b);
}

int main(void) {
    RUN_TEST(test_shapes);
    RUN_TEST(test_tensor_lifetime);
    RUN_TEST(test_wrapped_buffer);
    RUN_TEST(test_cache_reuse);
    RUN_TEST(test_cache_serves_smaller_sizes);
    RUN_TEST(test_concat_rows);
    return psg_test_summary();
}
