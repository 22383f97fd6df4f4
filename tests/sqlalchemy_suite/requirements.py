"""What SQLite supports, for SQLAlchemy's dialect compliance suite.

The values are the ones SQLAlchemy's own ``test/requirements.py``
(``DefaultRequirements``, 2.1.9) gives its ``sqlite+pysqlite`` dialect on a
file database, wherever they differ from ``SuiteRequirements``' defaults:
litegate's dialect is that dialect, so it claims exactly the same. One
exception: ``savepoints`` (below).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.testing import exclusions
from sqlalchemy.testing.requirements import SuiteRequirements

# SQLite has these (SuiteRequirements' default: no).
SUPPORTED = [
    "autocommit",
    "boolean_col_expressions",
    "check_constraint_reflection",
    "computed_columns",
    "computed_columns_reflect_persisted",
    "computed_columns_stored",
    "computed_columns_virtual",
    "create_table_as",
    "create_temp_table_as",
    "ctes",
    "ctes_with_values",
    "date_historic",
    "datetime_historic",
    "datetime_literals",
    "dbapi_lastrowid",
    "emulated_lastrowid",
    "emulated_lastrowid_even_with_sequences",
    "except_",
    "expression_server_defaults",
    "fetch_expression",
    "fetch_offset_with_options",
    "fk_constraint_option_reflection_ondelete_noaction",
    "fk_constraint_option_reflection_ondelete_restrict",
    "fk_constraint_option_reflection_onupdate_restrict",
    "float_or_double_precision_behaves_generically",
    "foreign_key_constraint_name_reflection",
    "foreign_key_constraint_option_reflection_ondelete",
    "foreign_key_constraint_option_reflection_onupdate",
    "index_ddl_if_exists",
    "indexes_check_column_order",
    "indexes_with_expressions",
    "infinity_floats",
    "inline_check_constraint_reflection",
    "intersect",
    "isolation_level",
    "json_array_indexes",
    "json_type",
    "legacy_unconditional_json_extract",
    "mod_operator_as_percent_sign",
    "non_updating_cascade",
    "nullsordering",
    "nvarchar_types",
    "order_by_label_with_expression",
    "percent_schema_names",
    "precision_numerics_enotation_small",
    "precision_numerics_retains_significant_digits",
    "reflect_table_options",
    "reflects_pk_names",
    "regexp_match",
    "repeated_column_foreign_keys",
    "repeated_remote_col_foreign_keys",
    "server_defaults",
    "skip_autocommit_rollback",
    "supports_bitwise_and",
    "supports_bitwise_not",
    "supports_bitwise_or",
    "supports_bitwise_shift",
    "supports_bitwise_xor",
    "table_ddl_if_exists",
    "tuple_in",
    "tuple_in_w_empty",
    "unicode_ddl",
    "update_from",
    "view_column_reflection",
    "view_reflection",
    "views",
    "window_functions",
    "window_range",
    "window_range_numeric",
]
# SQLite lacks these, or SQLAlchemy does not test them there.
UNSUPPORTED = [
    "foreign_keys",
    "implicitly_named_constraints",
    "independent_connections",
    "json_index_supplementary_unicode_element",
    "nested_aggregates",
    "numeric_received_as_decimal_untyped",
    "on_update_cascade",
    "on_update_or_deferrable_fks",
    "parens_in_union_contained_select_w_limit_offset",
    "parens_in_union_contained_select_wo_limit_offset",
    "temp_table_reflect_indexes",
    "temp_table_reflection",
    "temporary_tables",
]


class Requirements(SuiteRequirements):
    # SQLAlchemy skips savepoints on sqlite because pysqlite begins its
    # transactions implicitly, after a SAVEPOINT may already have run;
    # litegate sends BEGIN itself, so SQLite's savepoints work and the
    # suite's savepoint tests run.
    @property
    def savepoints(self) -> Any:
        return exclusions.open()

    def get_order_by_collation(self, config: Any) -> str:
        return "NOCASE"


def _rule(supported: bool) -> property:
    return property(lambda self: exclusions.open() if supported else exclusions.closed())


for _name in SUPPORTED:
    setattr(Requirements, _name, _rule(True))
for _name in UNSUPPORTED:
    setattr(Requirements, _name, _rule(False))
