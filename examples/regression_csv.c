/* examples/regression_csv.c — linear regression from a CSV (columns x1, x2, y) on 2 replicas of
 * an embedded cluster: each replica reads only its shard of the file, f32 targets, "mse".
 * Usage: regression_csv FILE.csv; prints the learned weights. */
#include <stdio.h>

#include "ct/trainer.h"

static ct_module *make_linear(trainer_ctx *ctx)
{
    (void)ctx;
    return CT_SEQUENTIAL(ct_nn_linear_new(2, 1, true));
}

/* this replica's shard of the CSV: features x1, x2; the last column an f32 target */
static int make_csv(trainer_ctx *ctx, trainer_data *d)
{
    d->sharded = true;
    return ct_dataset_open_csv_shard(
        trainer_config_str(ctx, "csv", ""), &(ct_csv_opts){.label_column = -1, .targets = 1},
        trainer_ctx_rank(ctx), trainer_ctx_world_size(ctx), &d->train, NULL);
}

int main(int argc, char **argv)
{
    trainer_register_model("linear", make_linear);
    trainer_register_data("csv", make_csv);
    ct_init(NULL); /* in a replica process: serves, never returns */
    char config[600];
    snprintf(config, sizeof config, "lr=0.1,csv=%s", argc > 1 ? argv[1] : "data.csv");
    trainer *t = NULL;
    trainer_stats st;
    int rc = trainer_create(&(trainer_opts){.model = "linear",
                                            .data = "csv",
                                            .optimizer = "sgd",
                                            .loss = "mse",
                                            .config = config,
                                            .num_replicas = 2,
                                            .batch_size = 16,
                                            .epochs = 8,
                                            .seed = 1},
                            &t);
    if (rc == 0)
        rc = trainer_train(t, .stats = &st);
    if (rc == 0) {
        const ct_param_ref *p;
        int n;
        ct_module_params(trainer_get_model(t), &p, &n);
        printf("train loss %.6f\nw = %.4f %.4f\nb = %.4f\n", st.train_loss, p[0].value[0],
               p[0].value[1], p[1].value[0]);
    } else {
        fprintf(stderr, "regression_csv: %s\n", ct_last_error());
    }
    trainer_shutdown(&t);
    ct_shutdown();
    return rc == 0 ? 0 : 1;
}
