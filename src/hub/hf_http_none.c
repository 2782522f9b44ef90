/*
 * hf_http_none.c: hf_http.h in a build without libcurl (-DVLLM_CURL=OFF): the hub cache still resolves
 * model ids, every download is refused with a message saying why.
 */
#include "hub/hf_http.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define NO_CURL "this vllmc was built without libcurl (-DVLLM_CURL=OFF): it cannot download from the hub; " \
                "use a cached model (HF_HUB_OFFLINE=1) or a local folder"

void hfh_reply_free(hfh_reply *r) {
    if (!r) return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

vllm_status hfh_global_init(void) { return vt_error(VLLM_ERR_UNSUPPORTED, NO_CURL); }

vllm_status hfh_get(const hfh_conf *c, const char *url, hfh_reply *r) {
    (void)c;
    (void)url;
    memset(r, 0, sizeof *r);
    return hfh_global_init();
}

vllm_status hfh_fetch_file(const hfh_conf *c, const hfh_download *d, hfh_reply *r) {
    (void)c;
    (void)d;
    memset(r, 0, sizeof *r);
    return hfh_global_init();
}
