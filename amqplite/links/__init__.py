"""Links between brokers: shovels (federation later), tasks in the root nursery.

``uri`` and ``config`` are pure (parsing, validation); ``client`` is a small
trio-native AMQP 0-9-1 client over ``protocol/``'s codec; ``shovel`` runs one
shovel; ``supervisor`` starts and stops them as runtime parameters change.
"""
