"""Client quotas (Kafka's ClientQuotaManager): stored by AlterClientQuotas, described by
DescribeClientQuotas, and producer/consumer byte rates enforced on Produce and Fetch.
`manager.ClientQuotas` is what the broker owns (`broker.quotas`); `entities` the admin rules;
`rate` Kafka's sampled rate and throttle time."""
