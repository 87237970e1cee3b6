strata_add_test(test_knobs LABEL unit SOURCES test_knobs.cpp LIBS strata_engine)
