/* tests/security/test_secret_env.c — a secret file named by CT_SECRET_FILE that cannot be read:
 * the error names both the variable and the file (the variable is what the user set), through
 * ct__auth_load (ct-head, ct-node, ctup) and through ct_init (a driver), and nothing starts;
 * an explicit path (--secret-file, ct_init_opts.secret_file) is named as a file only.
 * Starts no process. */
#include "sec.h"

#include "common/auth.h"
#include "ct/ct.h"

int main(void)
{
    h_init();
    char dir[] = "/tmp/ct-secret-env.XXXXXX", missing[200], msg[1200];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(missing, sizeof missing, "%s/no-such.secret", dir);
    CHECK_OK(setenv("CT_SECRET_FILE", missing, 1));

    /* ct__auth_load(NULL): the path comes from the variable */
    int rc = ct__auth_load(NULL);
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    printf("ct__auth_load: %d: %s\n", rc, msg);
    CHECK_EQ_INT(rc, CT_EACCES);
    CHECK(strstr(msg, "CT_SECRET_FILE") != NULL);
    CHECK(strstr(msg, missing) != NULL);
    CHECK(strstr(msg, "No such file") != NULL);

    /* a driver: ct_init refuses before anything starts, with the same words */
    unsetenv("CT_ADDRESS");
    rc = ct_init(NULL);
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    printf("ct_init: %d: %s\n", rc, msg);
    CHECK_EQ_INT(rc, CT_EACCES);
    CHECK(strstr(msg, "environment variable CT_SECRET_FILE=") != NULL);
    CHECK(strstr(msg, missing) != NULL);
    if (rc == 0)
        ct_shutdown();

    /* an explicit path that is not the variable's: the file only */
    char other[220];
    snprintf(other, sizeof other, "%s/other.secret", dir);
    rc = ct__auth_load(other);
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    printf("explicit: %d: %s\n", rc, msg);
    CHECK_EQ_INT(rc, CT_EACCES);
    CHECK(strstr(msg, other) != NULL);
    CHECK(strstr(msg, "CT_SECRET_FILE") == NULL);

    rmdir(dir);
    if (h_failures) {
        fprintf(stderr, "test_secret_env: %d failure(s)\n", h_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
