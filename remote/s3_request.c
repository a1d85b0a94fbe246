/* The request engine: n requests over one curl multi handle, at most
 * c->parallel in flight, each tried again after a refused or timed-out
 * connection, a cut transfer, a 5xx answer or SlowDown, with exponential
 * backoff (100 ms doubling to 4 s, with jitter).  A failure is one line:
 * the method, the object, then the HTTP status and S3 code, or curl's
 * reason (a certificate, a refused connection) -- never a secret. */
#include "s3.h"
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void s3_req_free(struct s3_req *r)
{
    free(r->resp);
    r->resp = NULL;
    r->resp_len = 0;
}

const char *s3_first_error(const struct s3_req *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) if (reqs[i].failed) return reqs[i].err;
    return "unknown error";
}

struct slot {
    CURL *h;
    char errbuf[CURL_ERROR_SIZE];
    int overflow;
    int write_errno; /* to_fd: the pwrite that failed */
};

static size_t on_body(char *p, size_t sz, size_t nm, void *arg)
{
    struct slot *sl = arg;
    struct s3_req *r;
    curl_easy_getinfo(sl->h, CURLINFO_PRIVATE, (char **)&r);
    size_t n = sz * nm;
    if (r->received) __atomic_add_fetch(r->received, n, __ATOMIC_RELAXED);
    if (r->to_fd) {
        if (r->range_len && r->got + n > r->range_len) { sl->overflow = 1; return 0; }
        for (size_t w = 0; w < n;) {
            ssize_t k = pwrite(r->fd, p + w, n - w, (off_t)(r->range_off + r->got + w));
            if (k <= 0) { sl->write_errno = k < 0 ? errno : EIO; return 0; }
            w += (size_t)k;
        }
        r->got += n;
        return n;
    }
    if (r->dst) {
        if (r->got + n > r->dst_cap) { sl->overflow = 1; return 0; }
        memcpy((char *)r->dst + r->got, p, n);
        r->got += n;
        return n;
    }
    char *nb = realloc(r->resp, r->resp_len + n + 1);
    if (!nb) return 0;
    r->resp = nb;
    memcpy(r->resp + r->resp_len, p, n);
    r->resp_len += n;
    r->resp[r->resp_len] = 0;
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
    struct s3_req *r = arg;
    size_t n = sz * nm;
    if (n > 5 && !strncmp(p, "HTTP/", 5)) { r->etag[0] = 0; r->length = 0; r->total = 0; } /* a new answer (after 100, a redirect) */
    if (n > 14 && !strncasecmp(p, "Content-Range:", 14)) { /* "bytes A-B/TOTAL" */
        const char *sl = memchr(p, '/', n);
        if (sl && sl[1] != '*') r->total = strtoull(sl + 1, NULL, 10);
    }
    if (n > 5 && !strncasecmp(p, "ETag:", 5)) {
        const char *v = p + 5, *e = p + n;
        while (v < e && (*v == ' ' || *v == '"')) v++;
        size_t l = 0;
        while (v + l < e && v[l] != '"' && v[l] != '\r' && v[l] != '\n' && l + 1 < sizeof r->etag) l++;
        memcpy(r->etag, v, l);
        r->etag[l] = 0;
    }
    if (n > 15 && !strncasecmp(p, "Content-Length:", 15)) r->length = strtoull(p + 15, NULL, 10);
    return n;
}

static size_t on_read(char *buf, size_t sz, size_t nm, void *arg)
{
    struct s3_req *r = arg;
    size_t n = sz * nm, left = r->body_len - r->sent;
    if (n > left) n = left;
    memcpy(buf, (const char *)r->body + r->sent, n);
    r->sent += n;
    return n;
}

static int start(const struct s3_conf *c, struct s3_req *r, struct slot *sl)
{
    char url[4400];
    s3_url_for(url, sizeof url, c, r->key, r->query);
    CURL *h = sl->h = curl_easy_init();
    if (!h) return -1;
    sl->errbuf[0] = 0;
    sl->overflow = sl->write_errno = 0;
    r->got = r->sent = r->resp_len = 0;
    r->status = 0;
    curl_slist_free_all(r->hdrs);
    r->hdrs = s3_sign_headers(c, r);
    if (!r->hdrs) { curl_easy_cleanup(h); return -1; }
    char sig[128];
    snprintf(sig, sizeof sig, "aws:amz:%s:s3", c->region);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PRIVATE, (char *)r);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sig);
    curl_easy_setopt(h, CURLOPT_USERNAME, c->creds.key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, c->creds.secret);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, sl->errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, sl);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, c->stall_s);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (*c->ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (!strcmp(r->method, "PUT")) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, r);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (!strcmp(r->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    } else if (!strcmp(r->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    }
    if (r->to_fd) curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024); /* fewer, larger writes into place */
    if (r->range_len) {
        char range[64];
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)r->range_off,
                 (unsigned long long)(r->range_off + r->range_len - 1));
        curl_easy_setopt(h, CURLOPT_RANGE, range);
    }
    r->tries++;
    return 0;
}

/* After a transfer: 0 done, 1 try again, -1 failed (err set). */
static int judge(const struct s3_conf *c, struct s3_req *r, struct slot *sl, CURLcode rc)
{
    char obj[1300];
    s3_show(obj, sizeof obj, c, r->key);
    curl_easy_getinfo(sl->h, CURLINFO_RESPONSE_CODE, &r->status);
    if (rc == CURLE_OK && r->status >= 200 && r->status < 300) {
        if ((r->dst || r->to_fd) && r->range_len && r->got != r->range_len) {
            snprintf(r->err, sizeof r->err, "%s %s: %zu bytes received of the %llu asked for", r->method, obj, r->got,
                     (unsigned long long)r->range_len);
            return r->tries < c->attempts ? 1 : -1;
        }
        return 0;
    }
    if (rc == CURLE_OK && r->status == 404 && r->ok404) return 0;
    if (rc != CURLE_OK) {
        if (sl->write_errno) { /* the local disk, not the network: trying again would not help */
            snprintf(r->err, sizeof r->err, "%s %s: cannot write what it holds: %s", r->method, obj, strerror(sl->write_errno));
            return -1;
        }
        const char *why = sl->overflow ? "the answer is longer than asked for" : *sl->errbuf ? sl->errbuf : curl_easy_strerror(rc);
        int again = rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_RECV_ERROR ||
                    rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE ||
                    rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM;
        snprintf(r->err, sizeof r->err, "%s %s: %s%s", r->method, obj, why,
                 again && r->tries >= c->attempts ? " (tried " : "");
        if (again && r->tries >= c->attempts) {
            size_t l = strlen(r->err);
            snprintf(r->err + l, sizeof r->err - l, "%d times)", r->tries);
        }
        return again && r->tries < c->attempts ? 1 : -1;
    }
    char code[128] = "", msg[256] = "";
    if (r->resp) s3_error_code(r->resp, r->resp_len, code, sizeof code, msg, sizeof msg);
    if (!*code && r->status == 404) snprintf(code, sizeof code, "NoSuchKey");
    if (!*code && r->status == 403) snprintf(code, sizeof code, "AccessDenied");
    snprintf(r->err, sizeof r->err, "%s %s: HTTP %ld%s%s%s%s%s", r->method, obj, r->status, *code ? " " : "", code,
             *msg ? " (" : "", msg, *msg ? ")" : "");
    int again = r->status >= 500 || r->status == 429 || !strcmp(code, "SlowDown") || !strcmp(code, "RequestTimeout");
    if (again && r->tries >= c->attempts) {
        size_t l = strlen(r->err);
        snprintf(r->err + l, sizeof r->err - l, " (tried %d times)", r->tries);
    }
    return again && r->tries < c->attempts ? 1 : -1;
}

static void backoff(struct s3_req *r)
{
    uint64_t ms = 100ull << (r->tries > 6 ? 5 : r->tries - 1);
    if (ms > 4000) ms = 4000;
    ms += (uint64_t)rand() % (ms / 2 + 1);
    r->not_before_ns = now_ns() + ms * 1000000ull;
}

int s3_perform(const struct s3_conf *c, struct s3_req *reqs, size_t n)
{
    static int inited;
    if (!inited) { curl_global_init(CURL_GLOBAL_DEFAULT); inited = 1; }
    CURLM *m = curl_multi_init();
    int par = c->parallel > 0 ? c->parallel : 1;
    struct slot *slots = calloc((size_t)par, sizeof *slots);
    int *state = calloc(n ? n : 1, sizeof *state); /* 0 waiting, 1 in flight, 2 done */
    int *slot_of = calloc(n ? n : 1, sizeof *slot_of);
    if (!m || !slots || !state || !slot_of) {
        for (size_t i = 0; i < n; i++) { reqs[i].failed = 1; snprintf(reqs[i].err, sizeof reqs[i].err, "out of memory"); }
        free(slots); free(state); free(slot_of);
        if (m) curl_multi_cleanup(m);
        return -1;
    }
    for (size_t i = 0; i < n; i++) { reqs[i].tries = 0; reqs[i].failed = 0; reqs[i].err[0] = 0; reqs[i].not_before_ns = 0; }
    size_t done = 0;
    int active = 0, bad = 0;
    while (done < n) {
        uint64_t now = now_ns(), wake = UINT64_MAX;
        for (size_t i = 0; i < n && active < par; i++) {
            if (state[i] != 0) continue;
            if (reqs[i].not_before_ns > now) { if (reqs[i].not_before_ns < wake) wake = reqs[i].not_before_ns; continue; }
            int s = 0;
            while (slots[s].h) s++;
            if (start(c, &reqs[i], &slots[s]) < 0) {
                reqs[i].failed = 1;
                snprintf(reqs[i].err, sizeof reqs[i].err, "%s: cannot make the request (out of memory)", reqs[i].method);
                state[i] = 2; done++; bad = 1;
                if (reqs[i].on_done) reqs[i].on_done(&reqs[i], reqs[i].done_arg);
                continue;
            }
            curl_multi_add_handle(m, slots[s].h);
            state[i] = 1; slot_of[i] = s; active++;
        }
        int running;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            struct s3_req *r;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            size_t i = (size_t)(r - reqs);
            struct slot *sl = &slots[slot_of[i]];
            int v = judge(c, r, sl, msg->data.result);
            curl_multi_remove_handle(m, sl->h);
            curl_easy_cleanup(sl->h);
            sl->h = NULL;
            active--;
            if (v == 1) { s3_req_free(r); backoff(r); state[i] = 0; continue; }
            if (v < 0) { r->failed = 1; bad = 1; }
            curl_slist_free_all(r->hdrs);
            r->hdrs = NULL;
            state[i] = 2;
            done++;
            if (r->on_done) r->on_done(r, r->done_arg);
        }
        if (done == n) break;
        int wait_ms = 100;
        if (!active && wake != UINT64_MAX) {
            uint64_t t = now_ns();
            wait_ms = wake > t ? (int)((wake - t) / 1000000ull) + 1 : 0;
        }
        curl_multi_poll(m, NULL, 0, wait_ms, NULL);
    }
    free(slots); free(state); free(slot_of);
    curl_multi_cleanup(m);
    return bad ? -1 : 0;
}

int s3_perform1(const struct s3_conf *c, struct s3_req *r) { return s3_perform(c, r, 1); }
