"""Links between brokers: shovels and exchange federation, tasks in the root nursery.

``uri``, ``config`` and ``federation_config`` are pure (parsing, validation);
``client`` is a small trio-native AMQP 0-9-1 client over ``protocol/``'s codec;
``pump`` forwards deliveries between two connections; ``shovel`` runs one
shovel and ``federation`` one federation link; ``supervisor`` starts and stops
shovels as runtime parameters change, ``federation_links`` the federation
links as policies, upstreams and exchanges change.
"""
