/* Credentials as every AWS tool finds them: the environment
 * (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the
 * shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
 * ~/.aws/credentials), profile AWS_PROFILE (default "default").  Nothing
 * here ever prints a secret: messages name the file and the profile. */
#include "s3.h"
#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t l = strlen(s);
    while (l && isspace((unsigned char)s[l - 1])) s[--l] = 0;
    return s;
}

static int from_file(struct s3_creds *cr, const char *path, const char *profile, char *why, size_t whylen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(why, whylen, "no credentials: AWS_ACCESS_KEY_ID is not set and %s cannot be read (%s)", path, strerror(errno));
        return -1;
    }
    char line[8192];
    int in = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        char *s = trim(line);
        if (*s == '#' || *s == ';' || !*s) continue;
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (e) *e = 0;
            in = !strcmp(trim(s + 1), profile);
            found |= in;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in || !eq) continue;
        *eq = 0;
        char *k = trim(s), *v = trim(eq + 1);
        if (!strcmp(k, "aws_access_key_id")) snprintf(cr->key, sizeof cr->key, "%s", v);
        else if (!strcmp(k, "aws_secret_access_key")) snprintf(cr->secret, sizeof cr->secret, "%s", v);
        else if (!strcmp(k, "aws_session_token")) snprintf(cr->token, sizeof cr->token, "%s", v);
    }
    fclose(f);
    if (!found) { snprintf(why, whylen, "no credentials: %s has no profile [%s]", path, profile); return -1; }
    if (!*cr->key || !*cr->secret) {
        snprintf(why, whylen, "no credentials: profile [%s] of %s lacks aws_access_key_id or aws_secret_access_key", profile, path);
        return -1;
    }
    return 0;
}

int s3_creds_load(struct s3_creds *cr, char *why, size_t whylen)
{
    memset(cr, 0, sizeof *cr);
    const char *k = getenv("AWS_ACCESS_KEY_ID"), *s = getenv("AWS_SECRET_ACCESS_KEY"), *t = getenv("AWS_SESSION_TOKEN");
    if (k && *k) {
        if (!s || !*s) { snprintf(why, whylen, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"); return -1; }
        if (strlen(k) >= sizeof cr->key || strlen(s) >= sizeof cr->secret || (t && strlen(t) >= sizeof cr->token)) {
            snprintf(why, whylen, "the AWS credentials in the environment are too long");
            return -1;
        }
        snprintf(cr->key, sizeof cr->key, "%s", k);
        snprintf(cr->secret, sizeof cr->secret, "%s", s);
        if (t) snprintf(cr->token, sizeof cr->token, "%s", t);
        return 0;
    }
    const char *path = getenv("AWS_SHARED_CREDENTIALS_FILE"), *profile = getenv("AWS_PROFILE");
    char buf[4096];
    if (!path || !*path) {
        const char *home = getenv("HOME");
        struct passwd *pw = home && *home ? NULL : getpwuid(getuid());
        if (pw) home = pw->pw_dir;
        snprintf(buf, sizeof buf, "%s/.aws/credentials", home ? home : "");
        path = buf;
    }
    return from_file(cr, path, profile && *profile ? profile : "default", why, whylen);
}
